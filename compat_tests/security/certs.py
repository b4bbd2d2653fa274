"""Test certificates made on the spot with ``cryptography``: a CA, the broker's certificate
(for ``localhost`` and ``127.0.0.1``), client certificates signed by that CA, and one signed by
a CA the broker does not trust. Nothing is fetched or shipped; keys are EC P-256 (fast)."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path           # the CA that signed everything below (clients trust it for the broker)
    server_cert: Path
    server_key: Path

    def client(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) of client ``name`` (CN=name), signed by the trusted CA."""
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gateway tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _issue(subject: str, key, issuer_name, issuer_key, *, ca: bool = False, server: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                        critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certs(directory: Path, clients: tuple[str, ...] = ("alice",),
               untrusted: tuple[str, ...] = ("mallory",)) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("gateway test CA", ca_key, _name("gateway test CA"), ca_key, ca=True)
    (directory / "ca.crt").write_bytes(_cert_pem(ca))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue("localhost", server_key, ca.subject, ca_key, server=True)
    (directory / "server.crt").write_bytes(_cert_pem(server))
    (directory / "server.key").write_bytes(_key_pem(server_key))
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    rogue = _issue("rogue CA", rogue_key, _name("rogue CA"), rogue_key, ca=True)
    for names, issuer, issuer_key in ((clients, ca, ca_key), (untrusted, rogue, rogue_key)):
        for name in names:
            key = ec.generate_private_key(ec.SECP256R1())
            cert = _issue(name, key, issuer.subject, issuer_key)
            (directory / f"{name}.crt").write_bytes(_cert_pem(cert))
            (directory / f"{name}.key").write_bytes(_key_pem(key))
    return Certs(directory, directory / "ca.crt", directory / "server.crt", directory / "server.key")
