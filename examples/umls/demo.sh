#!/usr/bin/env bash
# Import UMLS, train ComplEx on its training triples, evaluate on its test triples (filtered,
# every entity ranked) and export the embeddings. Run from the repository root: `make demo`.
set -euo pipefail
config=examples/umls/config.yaml
out=demo-output/umls
rm -rf "$out"

tessera import "$config" examples/umls/train.tsv examples/umls/valid.tsv examples/umls/test.tsv \
  --lhs-col 0 --rel-col 1 --rhs-col 2

tessera train "$config" -p edge_paths="$out/edges/train"

tessera eval "$config" --split test --filtered --output "$out/test_metrics.json"

tessera export "$config" "$out/export"

echo
echo "Test metrics (filtered):  $out/test_metrics.json"
echo "Checkpoint:               $out/checkpoints"
echo "Embeddings (TSV):         $out/export"
