#!/usr/bin/env python3
"""Build knowledge/moe_configs/index-<version>.json: the fused-MoE config file names one vLLM release ships.

Sources it can read (no network):
  --site-packages DIR   an installed vLLM (the folder holding ``vllm/``), e.g. a venv's site-packages;
  --wheel FILE.whl      a downloaded wheel (``pip download vllm==X --no-deps``);
  --sdist FILE.tar.gz   a source distribution;
  --git-dir DIR --rev TAG  a vLLM git mirror (bare repo) at a tag.
The version is read from the source where possible, else pass --version.

Example:
  python scripts/build_moe_index.py \
      --site-packages ~/.cache/vllm-tune/testenv/vllm-0.32.0/lib/python3.11/site-packages
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

CONFIGS = "vllm/model_executor/layers/fused_moe/configs/"
NAME = re.compile(r"^E=\d+,N=\d+,device_name=.+\.json$")
OUT_DIR = Path(__file__).resolve().parent.parent / "knowledge" / "moe_configs"


def _from_site(site: Path) -> tuple[list[str], str | None]:
    folder = site / CONFIGS
    names = [p.name for p in folder.iterdir()]
    version = None
    for meta in site.glob("vllm*.dist-info/METADATA"):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                version = line.split(":", 1)[1].strip()
                break
    return names, version


def _from_wheel(path: Path) -> tuple[list[str], str | None]:
    with zipfile.ZipFile(path) as whl:
        names = [n.rsplit("/", 1)[-1] for n in whl.namelist() if n.startswith(CONFIGS)]
    m = re.match(r"vllm(?:_\w+)?-([^-]+)-", path.name)
    return names, m.group(1) if m else None


def _from_sdist(path: Path) -> tuple[list[str], str | None]:
    with tarfile.open(path) as tar:
        names = [n.rsplit("/", 1)[-1] for n in tar.getnames() if CONFIGS in n]
    m = re.match(r"vllm-(.+)\.tar\.gz$", path.name)
    return names, m.group(1) if m else None


def _from_git(git_dir: Path, rev: str) -> tuple[list[str], str | None]:
    out = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "--name-only", f"{rev}:{CONFIGS}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split(), rev.removeprefix("v")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--site-packages", type=Path)
    src.add_argument("--wheel", type=Path)
    src.add_argument("--sdist", type=Path)
    src.add_argument("--git-dir", type=Path)
    parser.add_argument("--rev", help="tag for --git-dir, e.g. v0.34.0")
    parser.add_argument("--version", help="override the detected vLLM version")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    if args.site_packages:
        names, version = _from_site(args.site_packages)
        source = "installed package"
    elif args.wheel:
        names, version = _from_wheel(args.wheel)
        source = f"wheel {args.wheel.name}"
    elif args.sdist:
        names, version = _from_sdist(args.sdist)
        source = f"sdist {args.sdist.name}"
    else:
        if not args.rev:
            parser.error("--git-dir needs --rev")
        names, version = _from_git(args.git_dir, args.rev)
        source = f"git {args.rev}"
    version = args.version or version
    if not version:
        parser.error("could not detect the vLLM version; pass --version")
    files = sorted({n for n in names if NAME.match(n)})
    if not files:
        print(f"no fused-MoE config files found in the {source}", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"index-{version}.json"
    body = {"vllm_version": version, "source": source, "generated": dt.date.today().isoformat(),
            "count": len(files), "files": files}
    out.write_text(json.dumps(body, indent=1) + "\n")
    print(f"wrote {out} ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
