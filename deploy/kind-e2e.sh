#!/usr/bin/env bash
# Tessera end to end on a local kind cluster: build both images, install the chart, start
# MinIO, import UMLS into it, apply crds/examples/s3-secret.yaml and wait for the job to
# succeed. Needs docker, kind, kubectl and helm, and internet access for the base images.
# Run from anywhere: deploy/kind-e2e.sh   (KEEP=1 keeps the cluster afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${CLUSTER:-tessera-e2e}
version=0.1.0
namespace=default   # where crds/examples/s3-secret.yaml lands

kind create cluster --name "$cluster" --wait 120s
[ -n "${KEEP:-}" ] || trap 'kind delete cluster --name "$cluster"' EXIT

docker build --target operator -t "tessera-operator:$version" .
docker build --target trainer -t "tessera-trainer:$version" .
kind load docker-image --name "$cluster" "tessera-operator:$version" "tessera-trainer:$version"

helm install tessera helm/tessera --namespace tessera-system --create-namespace --wait

# MinIO at http://minio.storage.svc:9000, with the credentials of the example's Secret.
kubectl create namespace storage
kubectl -n storage create deployment minio --image=quay.io/minio/minio:latest --port=9000 \
  -- minio server /data
kubectl -n storage set env deployment/minio MINIO_ROOT_USER=tessera \
  MINIO_ROOT_PASSWORD=change-me
kubectl -n storage expose deployment minio --port=9000
kubectl -n storage rollout status deployment/minio --timeout=180s
kubectl -n storage run make-bucket --rm -i --restart=Never --image=quay.io/minio/mc:latest \
  --command -- sh -c 'until mc alias set m http://minio:9000 tessera change-me; do sleep 2;
  done && mc mb --ignore-existing m/tessera'

# The example's Secret first, so that UMLS can be imported with it before the job starts
# (a job whose data is missing fails at once, as bad input).
kubectl -n "$namespace" create secret generic tessera-s3 \
  --from-literal=AWS_ACCESS_KEY_ID=tessera --from-literal=AWS_SECRET_ACCESS_KEY=change-me
kubectl -n "$namespace" create configmap umls --from-file=examples/umls/config.yaml \
  --from-file=examples/umls/train.tsv
kubectl -n "$namespace" apply -f - <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: import-umls}
spec:
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: import
          image: tessera-trainer:$version
          args: [import, /umls/config.yaml, /umls/train.tsv, --lhs-col, "0", --rel-col, "1",
                 --rhs-col, "2", -p, "entity_path=s3://tessera/umls/entities",
                 -p, "edge_paths=s3://tessera/umls/edges/train"]
          env:
            - {name: AWS_ENDPOINT_URL, value: "http://minio.storage.svc:9000"}
          envFrom: [{secretRef: {name: tessera-s3}}]
          volumeMounts: [{name: umls, mountPath: /umls}]
      volumes: [{name: umls, configMap: {name: umls}}]
EOF
kubectl -n "$namespace" wait --for=condition=Complete job/import-umls --timeout=600s

kubectl -n "$namespace" apply -f crds/examples/s3-secret.yaml
kubectl -n "$namespace" get ej umls
kubectl -n "$namespace" wait --for=jsonpath='{.status.phase}'=Succeeded ej/umls --timeout=3600s
kubectl -n "$namespace" get ej umls
kubectl -n "$namespace" describe ej umls
