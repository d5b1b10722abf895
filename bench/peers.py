"""What subst is compared with: the same model through onnxsim, onnxslim and onnxruntime's transformers optimizer.

Each peer that is installed and succeeds writes ``<name>.<peer>.onnx`` under the given folder; one that is missing
or fails is left out with a line saying why (a peer failing on a model is a result, not a reason to stop).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx

TRANSFORMER_TYPES = {
    "bert": "bert",
    "gpt2": "gpt2",
    "llama": "gpt2",
    "t5_encoder": "t5",
    "whisper_encoder": "bert",
    "vit_b_16": "vit",
    "swin_t": "swin",
}
"""Corpus model family -> the transformers optimizer's ``model_type`` (llama and whisper have none of their own
in its list; the closest one's fusions are tried)."""


def _onnxsim(src: Path, dst: Path, family: str) -> bool:
    import onnxsim

    model, ok = onnxsim.simplify(onnx.load(str(src)))
    if ok:
        onnx.save_model(model, str(dst))
    return bool(ok)


def _onnxslim(src: Path, dst: Path, family: str) -> bool:
    import onnxslim

    onnx.save_model(onnxslim.slim(str(src)), str(dst))
    return True


def _ort_transformers(src: Path, dst: Path, family: str) -> bool:
    if family not in TRANSFORMER_TYPES:
        return False
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(src), model_type=TRANSFORMER_TYPES[family], num_heads=0, hidden_size=0, use_gpu=True)
    optimized.save_model_to_file(str(dst))
    return True


PEERS: dict[str, Callable[[Path, Path, str], bool]] = {
    "onnxsim": _onnxsim,
    "onnxslim": _onnxslim,
    "ort_transformers": _ort_transformers,
}


def peers(src: Path, tmp: Path, name: str, family: str = "", only: tuple[str, ...] = tuple(PEERS)) -> dict[str, Path]:
    """Each peer's output of ``src`` (a model of corpus ``family``, if any), by peer name."""
    out: dict[str, Path] = {}
    for peer in only:
        dst = tmp / f"{name}.{peer}.onnx"
        try:
            if PEERS[peer](src, dst, family):
                out[peer] = dst
        except Exception as e:
            print(f"{peer} failed on {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    return out
