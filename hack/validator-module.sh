#!/bin/sh
# validator-module.sh MODFILE OUTDIR (run in apiserver/bundled) writes
# OUTDIR/go.mod and OUTDIR/go.sum: MODFILE with k8s.io/apiserver replaced by
# a copy in OUTDIR/apiserver whose SecureServingOptionsWithLoopback.ApplyTo
# takes a loopback certificate supplied ahead
# (apiserver/bundled/validator-patch/loopback.go). Only the validator is
# built with it. It fails when upstream's code no longer has the one call it
# replaces, rather than build a validator that silently never takes the
# supplied certificate.
set -eu
modfile=$1
out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
go mod download -modfile="$modfile" k8s.io/apiserver
src=$(go list -modfile="$modfile" -m -f '{{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}' k8s.io/apiserver)
rm -rf "$out"
mkdir -p "$out"
cp -R "$src" "$out/apiserver"
chmod -R u+w "$out/apiserver"
file="$out/apiserver/pkg/server/options/serving_with_loopback.go"
call='certutil.GenerateSelfSignedCertKeyWithOptions('
n=$(grep -cF "$call" "$file" || true)
if [ "$n" != 1 ]; then
	echo "$file calls $call $n times, not once: update hack/validator-module.sh and apiserver/bundled/validator-patch for this k8s.io/apiserver" >&2
	exit 1
fi
sed 's/certutil\.GenerateSelfSignedCertKeyWithOptions(/generateLoopbackCertKey(/' "$file" > "$file.new"
mv "$file.new" "$file"
grep -v '^//go:build validatorpatch' "$here/apiserver/bundled/validator-patch/loopback.go" > "$out/apiserver/pkg/server/options/zz_validator_loopback.go"
cp "$modfile" "$out/go.mod"
cp "${modfile%.mod}.sum" "$out/go.sum"
go mod edit -modfile="$out/go.mod" -replace "k8s.io/apiserver=$out/apiserver"
