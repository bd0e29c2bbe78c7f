"""Generate the demo's input: JSONL files of short and long documents.

    python generate_sample_data.py                 # ./input: 8 files x 100 documents
    python generate_sample_data.py --if-missing    # only when ./input has no .jsonl yet
"""

from __future__ import annotations

import argparse
import glob
import os

from curator_dask.sample_data import generate_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="./input", help="output directory (default ./input)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--docs", type=int, default=100, help="documents per file")
    parser.add_argument("--short-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--if-missing", action="store_true",
                        help="do nothing when the directory already holds .jsonl files")
    args = parser.parse_args()
    if args.if_missing and glob.glob(os.path.join(args.out, "*.jsonl")):
        print(f"{args.out} already has input; leaving it as is")
        return
    paths = generate_jsonl(args.out, files=args.files, docs_per_file=args.docs,
                           short_fraction=args.short_fraction, seed=args.seed)
    print(f"wrote {len(paths)} files to {args.out}")


if __name__ == "__main__":
    main()
