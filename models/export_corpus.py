"""Re-export the corpus of real exporter output (models/corpus/): torchvision and Hugging Face models exported by
torch.onnx, as users export them, with their weights stripped so the repo stays small.

    python3 models/export_corpus.py OUTDIR            # every entry; needs torch, torchvision, transformers,
    python3 models/export_corpus.py OUTDIR --only a,b #   onnx and onnxscript (the GPU machine has them)
    python3 models/export_corpus.py models/corpus --only vit_b_16_ts   # re-export one, keep the others

Models are built from their configs with random init (no network). Each is exported by torch.onnx's TorchScript
exporter at opset 17 (``ts``) and/or the dynamo exporter at its default opset (``dynamo``), with a dynamic batch
dim (and a dynamic sequence dim for text models) where the exporter writes one; a failed dynamic export is
retried static. Stripping (`strip`) keeps every initializer's name, shape and dtype but drops the data of float
tensors over 64 elements (marked ``doc_string = "stripped"``); integer, bool and small tensors stay exact.
Node doc strings and metadata (the dynamo exporter's stack traces) are dropped: they were most of the bytes.
`models/corpus.py` fills the stripped tensors with seeded values when a model is loaded.

OUTDIR gets ``NAME.onnx`` per model and ``manifest.json`` (exporter, opset, dtype, dims, torch version, or the
error; updated where one exists), and everything again in ``corpus.tar`` (or ``--tar PATH``), rewritten after
each model, so an interrupted run keeps what it made. This script does not import taso: it runs where torch is, not where subst is.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import onnx
import torch

STRIP_ABOVE = 64
"""Float tensors with more elements than this lose their data; smaller ones (scales, epsilons) stay exact."""

FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


# ---- the models -------------------------------------------------------------------------------------------------


class Hidden(torch.nn.Module):
    """A Hugging Face model as a function of token ids (or features) to its last hidden state: one output."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).last_hidden_state


def vision(name: str, size: int = 224, **kwargs: object) -> Callable[[], tuple[torch.nn.Module, torch.Tensor]]:
    def build() -> tuple[torch.nn.Module, torch.Tensor]:
        import torchvision

        return torchvision.models.get_model(name, weights=None, **kwargs), torch.randn(2, 3, size, size)

    return build


def timm_model(name: str, size: int = 224) -> Callable[[], tuple[torch.nn.Module, torch.Tensor]]:
    """A timm model at random init (no network): the families torchvision lacks (ConvNeXt, EfficientNet,
    re-parameterizable, MLP-only and hybrid conv-attention nets)."""

    def build() -> tuple[torch.nn.Module, torch.Tensor]:
        import timm

        torch.manual_seed(0)
        return timm.create_model(name, pretrained=False), torch.randn(2, 3, size, size)

    return build


def text(kind: str) -> Callable[[], tuple[torch.nn.Module, torch.Tensor]]:
    def build() -> tuple[torch.nn.Module, torch.Tensor]:
        import transformers as tf

        torch.manual_seed(0)
        ids = torch.randint(0, 1000, (2, 16))
        if kind == "bert":
            m = tf.BertModel(tf.BertConfig(num_hidden_layers=4), add_pooling_layer=False)
        elif kind == "gpt2":
            m = tf.GPT2Model(tf.GPT2Config(n_layer=4, use_cache=False))
        elif kind == "llama":
            cfg = tf.LlamaConfig(
                hidden_size=512,
                intermediate_size=1376,
                num_hidden_layers=4,
                num_attention_heads=8,
                num_key_value_heads=4,
                vocab_size=32000,
                use_cache=False,
            )
            m = tf.LlamaModel(cfg)
        elif kind == "t5":
            m = tf.T5EncoderModel(tf.T5Config(d_model=512, d_ff=2048, num_layers=4, num_heads=8, use_cache=False))
        elif kind == "distilbert":
            m = tf.DistilBertModel(tf.DistilBertConfig(n_layers=4))
        elif kind == "opt":
            m = tf.OPTModel(tf.OPTConfig(hidden_size=512, ffn_dim=2048, num_hidden_layers=4, num_attention_heads=8))
        elif kind == "qwen2":
            cfg = tf.Qwen2Config(
                hidden_size=512,
                intermediate_size=1376,
                num_hidden_layers=4,
                num_attention_heads=8,
                num_key_value_heads=2,
                vocab_size=32000,
                use_cache=False,
            )
            m = tf.Qwen2Model(cfg)
        elif kind == "wav2vec2":
            cfg = tf.Wav2Vec2Config(hidden_size=384, num_hidden_layers=4, num_attention_heads=6, intermediate_size=1536)
            m = tf.Wav2Vec2Model(cfg)
            ids = torch.randn(2, 16000)
        elif kind == "whisper":
            cfg = tf.WhisperConfig(
                d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536, max_source_positions=100
            )
            m = tf.WhisperModel(cfg).get_encoder()
            ids = torch.randn(2, 80, 200)
        else:
            raise ValueError(kind)
        return Hidden(m), ids

    return build


BUILDERS: dict[str, Callable[[], tuple[torch.nn.Module, torch.Tensor]]] = {
    "resnet50": vision("resnet50"),
    "mobilenet_v2": vision("mobilenet_v2"),
    "mobilenet_v3_large": vision("mobilenet_v3_large"),
    "inception_v3": vision("inception_v3", 299, aux_logits=False, init_weights=False),
    "googlenet": vision("googlenet", aux_logits=False, init_weights=False),
    "squeezenet1_1": vision("squeezenet1_1"),
    "densenet121": vision("densenet121"),
    "shufflenet_v2": vision("shufflenet_v2_x1_0"),
    "resnext50": vision("resnext50_32x4d"),
    "vit_b_16": vision("vit_b_16"),
    "swin_t": vision("swin_t"),
    "bert": text("bert"),
    "t5_encoder": text("t5"),
    "whisper_encoder": text("whisper"),
    "gpt2": text("gpt2"),
    "llama": text("llama"),
    "distilbert": text("distilbert"),
    "opt": text("opt"),
    "qwen2": text("qwen2"),
    "wav2vec2": text("wav2vec2"),
    "convnext_tiny": timm_model("convnext_tiny"),
    "efficientnet_b0": timm_model("efficientnet_b0"),
    "repvgg_a0": timm_model("repvgg_a0"),
    "mobileone_s0": timm_model("mobileone_s0"),
    "mixer_s16": timm_model("mixer_s16_224"),
    "resmlp_12": timm_model("resmlp_12_224"),
    "mobilevit_xs": timm_model("mobilevit_xs", 256),
    "deit_tiny": timm_model("deit_tiny_patch16_224"),
    "regnety_002": timm_model("regnety_002"),
}

# (model, exporter, dtype): the corpus. Text models take (batch, seq) dims, vision and audio models batch only.
ENTRIES: list[tuple[str, str, str]] = [
    *[(m, "ts", "float32") for m in BUILDERS],
    *[
        (m, "dynamo", "float32")
        for m in (
            "resnet50",
            "mobilenet_v3_large",
            "vit_b_16",
            "swin_t",
            "bert",
            "t5_encoder",
            "whisper_encoder",
            "gpt2",
            "llama",
            "distilbert",
            "opt",
            "qwen2",
            "wav2vec2",
            "convnext_tiny",
            "mixer_s16",
        )
    ],
    ("squeezenet1_1", "ts", "float16"),
    ("resnet50", "ts", "float16"),
    ("bert", "dynamo", "float16"),
    ("gpt2", "dynamo", "float16"),
]


def entry_name(model: str, exporter: str, dtype: str) -> str:
    return f"{model}_{exporter}" + ("_fp16" if dtype == "float16" else "")


# ---- export -----------------------------------------------------------------------------------------------------


TOKEN_MODELS = {"bert", "t5_encoder", "gpt2", "llama", "distilbert", "opt", "qwen2"}
"""Models of token ids: dynamic in batch and sequence; the others (vision, audio) in batch only."""


def dim_names(model: str) -> list[str]:
    return ["batch", "seq"] if model in TOKEN_MODELS else ["batch"]


def export(module: torch.nn.Module, x: torch.Tensor, exporter: str, dims: list[str], path: Path) -> list[str]:
    """Export ``module`` at ``x`` to ``path``; the dims it stayed dynamic in (none where only a static export
    worked)."""
    input_name = "input_ids" if x.dtype == torch.int64 else "input"
    # torch's fused attention fast path (`_native_multi_head_attention`, taken in eval mode) has no TorchScript
    # export: ViT-B/16 exports only with it off, which changes nothing the model computes.
    torch.backends.mha.set_fastpath_enabled(exporter != "ts")
    for tried in (dims, []):
        try:
            if exporter == "ts":
                axes = {i: d for i, d in enumerate(tried)}
                torch.onnx.export(
                    module,
                    (x,),
                    str(path),
                    dynamo=False,
                    opset_version=17,
                    input_names=[input_name],
                    output_names=["output"],
                    dynamic_axes={input_name: axes, "output": axes} if axes else None,
                )
            else:
                shapes = ({i: torch.export.Dim(d, min=2, max=512) for i, d in enumerate(tried)},) if tried else None
                program = torch.onnx.export(
                    module,
                    (x,),
                    dynamo=True,
                    dynamic_shapes=shapes,
                    input_names=[input_name],
                    output_names=["output"],
                )
                program.save(str(path), external_data=False)
            return tried
        except Exception:
            if not tried:
                raise
            print(f"  dynamic export failed, retrying static:\n{traceback.format_exc(limit=2)}", flush=True)
    raise AssertionError("unreachable")


def strip(model: onnx.ModelProto) -> dict[str, int]:
    """Drop the data of large float tensors in place (initializers and Constant nodes, subgraphs included);
    the bytes kept and dropped."""
    kept = dropped = 0

    def visit(t: onnx.TensorProto) -> None:
        nonlocal kept, dropped
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type in FLOATS and n > STRIP_ABOVE:
            dropped += t.ByteSize()
            name, dims, dtype = t.name, list(t.dims), t.data_type
            t.Clear()
            t.name, t.data_type, t.doc_string = name, dtype, "stripped"
            t.dims.extend(dims)
        else:
            kept += t.ByteSize()

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            visit(t)
        for node in g.node:
            node.doc_string = ""
            del node.metadata_props[:]
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    visit(a.t)
                elif a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)

    graph(model.graph)
    for f in model.functions:
        for node in f.node:
            node.doc_string = ""
            del node.metadata_props[:]
    return {"bytes_kept": kept, "bytes_dropped": dropped}


def make(model: str, exporter: str, dtype: str, out: Path) -> dict:
    import torchvision
    import transformers

    name = entry_name(model, exporter, dtype)
    module, x = BUILDERS[model]()
    module.eval()
    if dtype == "float16":
        module, x = module.cuda().half(), x.cuda()
        if x.is_floating_point():
            x = x.half()
    raw = out / f"{name}.raw.onnx"
    t0 = time.perf_counter()
    with torch.no_grad():
        dynamic = export(module, x, exporter, dim_names(model), raw)
    proto = onnx.load(str(raw))
    raw.unlink()
    for extra in out.glob(f"{name}.raw.onnx*"):
        extra.unlink()
    sizes = strip(proto)
    onnx.save(proto, str(out / f"{name}.onnx"))
    return {
        "model": model,
        "exporter": "torch.onnx TorchScript" if exporter == "ts" else "torch.onnx dynamo",
        "opset": next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
        "dtype": dtype,
        "dims": dynamic,
        "example_shape": list(x.shape),
        "nodes": len(proto.graph.node),
        "file_bytes": (out / f"{name}.onnx").stat().st_size,
        **sizes,
        "export_seconds": round(time.perf_counter() - t0, 1),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default="", help="comma-separated entry names (default: all)")
    ap.add_argument("--tar", type=Path, help="where corpus.tar goes (default: OUTDIR/corpus.tar)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    only = {n for n in args.only.split(",") if n}
    existing = args.out / "manifest.json"
    manifest: dict[str, dict] = json.loads(existing.read_text()) if existing.exists() else {}
    for model, exporter, dtype in ENTRIES:
        name = entry_name(model, exporter, dtype)
        if only and name not in only:
            continue
        print(f"{name} ...", flush=True)
        try:
            manifest[name] = make(model, exporter, dtype, args.out)
            print(f"  ok {manifest[name]}", flush=True)
        except Exception as e:
            manifest[name] = {
                "model": model,
                "exporter": exporter,
                "dtype": dtype,
                "error": f"{type(e).__name__}: {e}"[:2000],
            }
            print(f"  FAILED {traceback.format_exc()}", flush=True)
        (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        with tarfile.open(args.tar or args.out / "corpus.tar", "w") as tar:
            for f in sorted(args.out.glob("*.onnx")) + [args.out / "manifest.json"]:
                tar.add(f, arcname=f.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
