"""TLS for the Kafka and AMQP listeners: the server context, and who the client certificate names.

The broker's certificate chain and key are PEM files (``--tls-cert``, ``--tls-key``). With
``--tls-client-ca`` the listeners ask for a client certificate and verify it against that CA
bundle (mutual TLS); ``--tls-client-auth required`` refuses a handshake without one,
``requested`` (the default) lets clients without a certificate in (they authenticate with
SASL or a password instead). A verified client certificate's subject CN is the identity used
by AMQP's EXTERNAL mechanism and, on Kafka, the principal of a connection without SASL.
"""
from __future__ import annotations

from pathlib import Path

from OpenSSL import SSL, crypto
from twisted.internet import ssl
from twisted.internet.interfaces import ISSLTransport


class TlsConfigError(Exception):
    """A certificate, key or CA file is missing or unusable; the message names it."""


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def _certificates(pem: bytes) -> list[crypto.X509]:
    out, marker = [], b"-----END CERTIFICATE-----"
    for block in pem.split(marker)[:-1]:
        out.append(crypto.load_certificate(crypto.FILETYPE_PEM, block + marker))
    return out


def server_options(cert: Path, key: Path, client_ca: Path | None = None,
                   client_auth: str = "requested") -> ssl.CertificateOptions:
    """The Twisted context factory of a TLS listener (TLS 1.2 or newer)."""
    try:
        chain = _certificates(_read(cert, "TLS certificate"))
        if not chain:
            raise TlsConfigError(f"no PEM certificate in {cert}")
        private_key = crypto.load_privatekey(crypto.FILETYPE_PEM, _read(key, "TLS key"))
        ca_certs = None
        if client_ca:
            ca_certs = _certificates(_read(client_ca, "client CA bundle"))
            if not ca_certs:
                raise TlsConfigError(f"no PEM certificate in the client CA bundle {client_ca}")
        elif client_auth == "required":
            raise TlsConfigError("--tls-client-auth required needs --tls-client-ca to verify client certificates")
        options = ssl.CertificateOptions(
            privateKey=private_key, certificate=chain[0], extraCertChain=chain[1:] or None,
            verify=ca_certs is not None, caCerts=ca_certs,
            requireCertificate=ca_certs is not None and client_auth == "required",
            raiseMinimumTo=ssl.TLSVersion.TLSv1_2)
        options.getContext().check_privatekey()  # the key belongs to the certificate
    except TlsConfigError:
        raise
    except (crypto.Error, SSL.Error, ValueError) as exc:
        raise TlsConfigError(f"TLS certificate {cert} / key {key} unusable: {exc}") from None
    return options


def peer_common_name(transport) -> str | None:
    """The subject CN of the client's verified certificate, or None (no TLS, no certificate)."""
    if not is_tls(transport):
        return None
    try:
        x509 = transport.getPeerCertificate()
    except Exception:
        return None
    if x509 is None:
        return None
    for key, value in x509.get_subject().get_components():
        if key == b"CN":
            return value.decode("utf-8", "replace")
    return None


def is_tls(transport) -> bool:
    return ISSLTransport.providedBy(transport)
