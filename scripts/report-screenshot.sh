#!/usr/bin/env bash
# The first page of the HTML report of the default run, as docs/report-first-page.png:
#   make run && scripts/report-screenshot.sh [OUT.png]
# Builds `snakemake --report` from the finished run in results/ and photographs it with headless
# Chromium (Debian: apt install chromium). Extra arguments after OUT go to snakemake (e.g.
# --configfile=my-blend.yaml for another run).
set -euo pipefail
out=${1:-docs/report-first-page.png}
shift || true
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  echo "report-screenshot: no Chromium found; install it (Debian: apt install chromium)" >&2
  exit 2
fi
html=$(mktemp --suffix=.html)
trap 'rm -f "$html"' EXIT
PATH="$PWD/.venv/bin:$PATH" snakemake --report "$html" "$@" >/dev/null
# the report is a script-built page: give its scripts time to draw before the picture
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=15000 \
  --window-size=1600,1300 --screenshot="$out" "file://$html" 2>/dev/null
echo "report-screenshot: $out"
