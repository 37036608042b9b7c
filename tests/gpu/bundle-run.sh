#!/bin/sh
# The GPU bundle's entry point, OUT/run (scripts/gpu-bundle copies this file;
# docs/gpu-suite.md): finds Python 3.9 or newer on PATH and hands over to the
# suite's runner inside the bundle. Runs from any directory.
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd -P) || {
	echo "run: cannot find the bundle's own directory" >&2
	exit 3
}
runner=$here/tests/gpu/bundle_run.py
if [ ! -f "$runner" ]; then
	echo "run: the bundle at $here is damaged: tests/gpu/bundle_run.py is missing (make it again with scripts/gpu-bundle)" >&2
	exit 3
fi
for py in python3 python3.14 python3.13 python3.12 python3.11 python3.10 python3.9; do
	command -v "$py" >/dev/null 2>&1 || continue
	if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
		exec "$py" "$runner" "$@"
	fi
done
echo "run: no Python 3.9 or newer on PATH (the suite's runner and checker are Python)" >&2
exit 3
