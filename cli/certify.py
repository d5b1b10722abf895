"""`subst certify`: the click layer over `taso.optimize.certify`, every step of a rewrite checked again."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.options import specs_option, store_option
from taso.errors import BadInput, CheckFailed
from taso.optimize.certify import certify as run_certify


@click.command()
@click.argument("original", type=click.Path(path_type=Path))
@click.argument("rewrite", type=click.Path(path_type=Path))
@click.option(
    "--certificate",
    "certificate_path",
    type=click.Path(path_type=Path),
    help="The certificate `subst optimize --certificate` wrote.  [default: REWRITE.certificate.json]",
)
@store_option("Rule store the rules of the steps must be proved in.")
@specs_option("Specs the rules' proofs must be from to be trusted.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def certify(
    original: Path, rewrite: Path, certificate_path: Path | None, store_path: Path, specs_dir: Path, as_json: bool
) -> None:
    """Check every step from ORIGINAL to REWRITE again, as its certificate lists them: each pass replayed and
    run against the graph before it at two sets of sizes, each rule proved and trusted now, and the chain of
    graphs from ORIGINAL ending at REWRITE. Exit 0: certified; 1: a step fails (named); 2: bad input.

    \b
    Example:
      subst optimize bert.onnx -o bert.opt.onnx --certificate bert.opt.cert.json
      subst certify bert.onnx bert.opt.onnx --certificate bert.opt.cert.json
    """
    for path in (original, rewrite):
        if not path.is_file():
            raise BadInput(f"{path}: no such model file")
    cert = certificate_path or rewrite.with_name(f"{rewrite.name}.certificate.json")
    verdict = run_certify(original, rewrite, cert, store_path, specs_dir)
    if as_json:
        click.echo(json.dumps(verdict.as_dict(), indent=2, default=str))
    else:
        click.echo("\n".join(verdict.lines()))
    if not verdict.ok:
        raise CheckFailed(f"not certified: {verdict.failure}")
