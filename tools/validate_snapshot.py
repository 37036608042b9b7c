#!/usr/bin/env python3
"""Validate gpumemtrace snapshots against docs/snapshot.schema.json (JSON Schema
draft 2020-12; docs/snapshot-format.md explains the keys).

Prints one line per problem, "FILE: PATH-IN-DOCUMENT: message" (the path as a
JSON Pointer, "/" for the whole document), and exits 1 when any file has one,
0 when every file is valid, 2 when the schema or the validator cannot be had.
A file that cannot be read or is no JSON document (a key twice in one object
included: the schema cannot see that) is one line too.

Needs the jsonschema package, 4.0 or newer (Debian: python3-jsonschema);
standard library otherwise. Functions return data; main() prints.

Usage: validate_snapshot.py [--schema SCHEMA] [--quiet] FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCHEMA = os.path.join(HERE, os.pardir, "docs", "snapshot.schema.json")
INSTALL_HINT = "install python3-jsonschema (apt-get install python3-jsonschema; scripts/test installs it)"


class SetupError(Exception):
    """The schema or the validator cannot be had, in one line."""


def _no_duplicate_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    seen: Dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} twice in one object")
        seen[key] = value
    return seen


def load_json(path: str) -> Any:
    """The document in path; OSError or ValueError (with a one-line message)
    when it cannot be read or parsed."""
    with open(path, encoding="utf-8") as f:
        return json.load(f, object_pairs_hook=_no_duplicate_keys)


def make_validator(schema_path: str = DEFAULT_SCHEMA) -> Any:
    """A Draft202012Validator for the schema in schema_path, with a format
    checker; SetupError when jsonschema or the schema is not usable."""
    try:
        import jsonschema  # type: ignore[import]
        from jsonschema import Draft202012Validator  # type: ignore[import]
    except ImportError:
        raise SetupError(f"{sys.executable} cannot import jsonschema 4.0 or newer: {INSTALL_HINT}") from None
    try:
        schema = load_json(schema_path)
    except (OSError, ValueError) as e:
        raise SetupError(f"{schema_path}: cannot read the schema: {e}") from None
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        raise SetupError(f"{schema_path}: not a valid draft 2020-12 schema: {e.message}") from None
    return Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def pointer(path: Any) -> str:
    """A JSON Pointer (RFC 6901) for a jsonschema error path."""
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else "/"


def document_problems(validator: Any, doc: Any) -> List[Tuple[str, str]]:
    """(pointer, message) for every schema error in doc, in document order."""
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [(pointer(e.absolute_path), e.message) for e in errors]


def file_problems(validator: Any, path: str) -> List[str]:
    """The lines to print for one file: none when it is valid."""
    try:
        doc = load_json(path)
    except OSError as e:
        return [f"{path}: /: cannot read: {e.strerror or e}"]
    except ValueError as e:
        return [f"{path}: /: not a JSON document: {e}"]
    return [f"{path}: {where}: {message}" for where, message in document_problems(validator, doc)]


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--schema", default=DEFAULT_SCHEMA, help="the schema (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="print nothing for valid files")
    args = ap.parse_args(argv)
    try:
        validator = make_validator(args.schema)
    except SetupError as e:
        print(f"validate_snapshot: {e}", file=sys.stderr)
        return 2
    failed = 0
    for path in args.files:
        lines = file_problems(validator, path)
        for line in lines:
            print(line)
        if lines:
            failed += 1
        elif not args.quiet:
            print(f"{path}: valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
