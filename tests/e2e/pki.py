"""The certificates of a test cluster, made with the `openssl` command at test time: a CA, the
API server's serving certificate for 127.0.0.1, client certificates (the user is the common
name, the groups the organisations, as Kubernetes reads them) and the service-account
signing key. ECDSA P-256 keys: quick to make, and every client here accepts them.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"
KEY_OPTIONS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class KeyPair:
    certificate: Path
    key: Path

    def certificate_data(self) -> str:
        return base64.b64encode(self.certificate.read_bytes()).decode()

    def key_data(self) -> str:
        return base64.b64encode(self.key.read_bytes()).decode()


class Pki:
    """A CA in `folder`, and the certificates it signs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ca = KeyPair(folder / "ca.crt", folder / "ca.key")
        _openssl("req", "-x509", *KEY_OPTIONS, "-keyout", self.ca.key, "-out",
                 self.ca.certificate, "-days", DAYS, "-subj", "/CN=tessera-test-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self.service_account_key = folder / "service-account.key"
        self.service_account_public_key = folder / "service-account.pub"
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                 self.service_account_key)
        _openssl("ec", "-in", self.service_account_key, "-pubout", "-out",
                 self.service_account_public_key)

    def serving(self, name: str, hosts: list[str]) -> KeyPair:
        """A server certificate for these host names and IP addresses."""
        names = ",".join(f"IP:{host}" if host[0].isdigit() else f"DNS:{host}"
                         for host in hosts)
        return self._sign(name, f"/CN={name}", f"subjectAltName={names}\n"
                          "extendedKeyUsage=serverAuth\n")

    def client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate that authenticates as `user` in `groups`."""
        subject = "".join(f"/O={group}" for group in groups) + f"/CN={user}"
        return self._sign(user.replace(":", "-"), subject, "extendedKeyUsage=clientAuth\n")

    def _sign(self, name: str, subject: str, extensions: str) -> KeyPair:
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        request = self.folder / f"{name}.csr"
        extension_file = self.folder / f"{name}.ext"
        extension_file.write_text("basicConstraints=CA:FALSE\n"
                                  "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                  "subjectKeyIdentifier=hash\n"
                                  "authorityKeyIdentifier=keyid\n" + extensions)
        _openssl("req", "-new", *KEY_OPTIONS, "-keyout", pair.key, "-out", request,
                 "-subj", subject)
        _openssl("x509", "-req", "-in", request, "-CA", self.ca.certificate, "-CAkey",
                 self.ca.key, "-CAcreateserial", "-days", DAYS, "-out", pair.certificate,
                 "-extfile", extension_file)
        return pair


def _openssl(*args: str | Path) -> None:
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True,
                          timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")
