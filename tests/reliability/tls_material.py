"""Certificates for a secured test broker, made with openssl in a temporary folder: a CA, a
broker certificate it signs (for 127.0.0.1), client certificates for mutual TLS as a PKCS#12
key store and as PEM (an encrypted PKCS#8 key and its chain, in one file as Java's PEM key
store reads it), and a stranger CA with a client certificate it signs (the wrong ones)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ClientCertificate:
    p12: Path  # PKCS#12 key store: key and chain, protected by ``password``
    pem: Path  # Java's PEM key store: the encrypted PKCS#8 key (``password``), then the chain
    password: str


@dataclass(frozen=True)
class TlsMaterial:
    ca: Path  # PEM of the CA that signs the broker's and the client's certificates
    broker_p12: Path  # the broker's key store (PKCS#12, ``password``)
    client: ClientCertificate  # signed by ``ca``, CN=client
    stranger_ca: Path  # a CA that signed nothing the broker trusts
    stranger_client: ClientCertificate  # signed by ``stranger_ca``, CN=client
    password: str


def openssl(*args: str) -> None:
    found = shutil.which("openssl")
    assert found, "openssl is needed to stage the TLS listeners"
    subprocess.run([found, *args], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    key, pem = folder / f"{name}.key", folder / f"{name}.pem"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(pem), "-days", "2",
            "-subj", f"/CN={name}")
    return key, pem


def make_leaf(folder: Path, name: str, ca: tuple[Path, Path], password: str, *, server: bool) -> ClientCertificate:
    """A key and a certificate ``ca`` signs, as a PKCS#12 store and as Java's PEM key store."""
    ca_key, ca_pem = ca
    key, csr, pem = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", f"/CN={name.split('-')[0]}")
    extensions = folder / f"{name}.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else "extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(pem), "-days", "2", "-extfile", str(extensions))
    p12 = folder / f"{name}.p12"
    openssl("pkcs12", "-export", "-in", str(pem), "-inkey", str(key), "-certfile", str(ca_pem), "-name", name,
            "-out", str(p12), "-passout", f"pass:{password}")
    encrypted = folder / f"{name}.pkcs8"
    # PBES1 (PBE-SHA1-3DES): Kafka's Java PEM reader lacks PBES2 ("PBES2 SecretKeyFactory not available").
    openssl("pkcs8", "-topk8", "-in", str(key), "-out", str(encrypted), "-v1", "PBE-SHA1-3DES",
            "-passout", f"pass:{password}")
    store = folder / f"{name}-keystore.pem"
    store.write_text(encrypted.read_text() + pem.read_text() + ca_pem.read_text())
    return ClientCertificate(p12, store, password)


def tls_material(folder: Path, password: str) -> TlsMaterial:
    ca = make_ca(folder, "test-ca")
    stranger = make_ca(folder, "stranger-ca")
    broker = make_leaf(folder, "broker", ca, password, server=True)
    return TlsMaterial(ca=ca[1], broker_p12=broker.p12, client=make_leaf(folder, "client", ca, password, server=False),
                       stranger_ca=stranger[1],
                       stranger_client=make_leaf(folder, "client-stranger", stranger, password, server=False),
                       password=password)
