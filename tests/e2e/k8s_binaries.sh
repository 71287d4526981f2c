#!/usr/bin/env bash
# Makes the three binaries the real-cluster tests run (etcd, kube-apiserver,
# kube-controller-manager; the envtest set) on a Debian 12 machine whose only registries are
# Debian's and PyPI: Kubernetes v1.20.2 is built from Debian's `kubernetes` source package with
# Debian's Go, etcd comes from Debian's `etcd-server`. The result is cached, so a second run
# only prints the folder. Needs root (or sudo) for apt-get on the first run.
#
#   tests/e2e/k8s_binaries.sh          # builds if needed, prints the folder
#   tests/e2e/k8s_binaries.sh --where  # only prints the folder (where the tests look)
set -euo pipefail

VERSION=v1.20.2
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tessera/k8s-$VERSION"
BINARIES=(etcd kube-apiserver kube-controller-manager)

if [[ "${1:-}" == --where ]]; then
    echo "$CACHE"
    exit 0
fi

complete() {
    local name
    for name in "${BINARIES[@]}"; do
        [[ -x "$CACHE/$name" ]] || return 1
    done
}

if complete; then
    echo "$CACHE"
    exit 0
fi

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

say() { echo "k8s_binaries: $*" >&2; }

# shellcheck disable=SC1091
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [[ "$codename" != bookworm ]]; then
    say "this recipe needs Debian 12 (bookworm), found '${codename:-unknown}';" \
        "put etcd, kube-apiserver and kube-controller-manager in a folder and set KUBEBUILDER_ASSETS"
    exit 65
fi

# Source packages: one deb-src entry of our own, so the machine's own lists stay untouched.
src_list=/etc/apt/sources.list.d/tessera-deb-src.sources
if [[ ! -f "$src_list" ]]; then
    say "adding $src_list"
    as_root tee "$src_list" >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go rsync jq make openssl >/dev/null

mkdir -p "$(dirname "$CACHE")"
work=$(mktemp -d "$(dirname "$CACHE")/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir bin

say "etcd from Debian's etcd-server"
apt-get download etcd-server >/dev/null
dpkg-deb -x etcd-server_*.deb etcd-deb
cp etcd-deb/usr/bin/etcd bin/etcd

say "kube-apiserver and kube-controller-manager $VERSION from Debian's kubernetes source"
apt-get source --download-only kubernetes >/dev/null
tar xzf kubernetes_*.orig.tar.gz
src=$(find . -maxdepth 1 -type d -name "kubernetes-${VERSION#v}" | head -n1)
if [[ -z "$src" ]]; then
    say "the kubernetes source package is not $VERSION: $(ls kubernetes_*.dsc)"
    exit 65
fi

# Go >= 1.18 needs reflect2 v1.0.2; the vendored v1.0.1 faults in the API server on the first
# custom resource with labels.
apt-get download golang-github-modern-go-reflect2-dev >/dev/null
dpkg-deb -x golang-github-modern-go-reflect2-dev_*.deb reflect2
vendored="$src/vendor/github.com/modern-go/reflect2"
rm -f "$vendored"/*.go "$vendored"/*.s
cp reflect2/usr/share/gocode/src/github.com/modern-go/reflect2/*.go \
   reflect2/usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$vendored/"

(
    cd "$src"
    export GOCACHE="$work/go-cache" GOPATH="$work/go-path"
    KUBE_GIT_VERSION=$VERSION KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean \
        GOLDFLAGS="-s -w" make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
)
cp "$src/_output/bin/kube-apiserver" "$src/_output/bin/kube-controller-manager" bin/

# Publish all three at once: a cache folder is either complete or absent.
rm -rf "$CACHE"
mv bin "$CACHE"
say "done"
echo "$CACHE"
