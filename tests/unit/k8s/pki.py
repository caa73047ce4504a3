"""A throwaway CA with a server and a client certificate, in PEM, for the kubeconfig and TLS tests."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "kubernetes.default.svc"


@dataclass(frozen=True)
class Pair:
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Pki:
    ca: Pair
    server: Pair  #: names SERVER_NAME only (not 127.0.0.1): reaching it needs tls-server-name
    client: Pair  #: CN=tester
    other_key: bytes  #: a key that belongs to no certificate here


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    dns: str | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if dns is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
        )
    return builder.sign(signer, hashes.SHA256())


def make_pki() -> Pki:
    ca_key, server_key, client_key = _key(), _key(), _key()
    ca = _cert("test-ca", ca_key, None, ca_key, ca=True)
    server = _cert(
        SERVER_NAME, server_key, ca.subject, ca_key, dns=SERVER_NAME, usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    client = _cert("tester", client_key, ca.subject, ca_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    pem = serialization.Encoding.PEM
    return Pki(
        ca=Pair(ca.public_bytes(pem), _pem_key(ca_key)),
        server=Pair(server.public_bytes(pem), _pem_key(server_key)),
        client=Pair(client.public_bytes(pem), _pem_key(client_key)),
        other_key=_pem_key(_key()),
    )
