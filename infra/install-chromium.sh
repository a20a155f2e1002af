#!/usr/bin/env bash
# Debian's Chromium for the browser tests (tests/system/test_audit_page.py drives it with playwright,
# executable_path=/usr/bin/chromium). A test tool's own browser download does not work here;
# Debian's package does. Idempotent: does nothing when /usr/bin/chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-chromium: need root and apt-get to install Debian's chromium; the browser test will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
