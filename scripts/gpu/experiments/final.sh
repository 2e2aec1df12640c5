#!/usr/bin/env bash
# The GPU tests on the final code, then keijzer6 runs (NAME:FLAGS, see steal.sh) with the host's CPU
# accounting around each.
set -uo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/../harness/tests.sh"
echo "== runs"
bash "$(dirname "${BASH_SOURCE[0]}")/steal.sh" "$@"
