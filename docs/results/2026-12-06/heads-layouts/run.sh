#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/../../../.."
R=docs/results/2026-12-06/heads-layouts
H=homespec/data/heads/smollm2-135m-instruct
T=/tmp/layouts; rm -rf $T; mkdir -p $T
HS=".venv/bin/homespec"
$HS draft export $H --format speculators --out $T/speculators 2>&1 | tail -2
$HS draft export $H --format hf --out $T/hf 2>&1 | tail -2
$HS draft export $H --format gguf --dtype f16 --out $T/head.gguf 2>&1 | tail -2
for name in shipped speculators hf gguf; do
  case $name in shipped) d=$H;; speculators) d=$T/speculators;; hf) d=$T/hf;; gguf) d=$T/head.gguf;; esac
  echo "== $name $d"
  $HS bench --methods none,eagle3 --no-guard --draft-dtype f16 --limit 8 -n 64 --threads 1 --draft $d --json-out $R/$name.json > $R/$name.txt 2>&1
  python3 -c "
import json;d=json.load(open('$R/$name.json'));m=d['methods']['eagle3'];print('$name', 'tau', m['mean_accepted'], 'identical', m['identical_fraction'], 'tokens', m['tokens'])"
done
