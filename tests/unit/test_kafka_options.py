"""How every Kafka client connects (`kafka.client_options`), for each security protocol; the settings'
checks; and that the secrets stay out of every repr, dump, log line and error."""

from __future__ import annotations

import datetime
import logging
import ssl
from pathlib import Path
from typing import Any

import certifi
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from docsum_parser.settings import ParserSettings
from docsum_shared.kafka import client_options
from docsum_shared.settings import Settings, bad_setting, get_settings, service_settings

PASSWORD = "s3cret-Pa55word"
# Raw inputs, as the environment gives them: Settings validates and converts each.
SASL: dict[str, Any] = {
    "kafka_sasl_mechanism": "SCRAM-SHA-512",
    "kafka_sasl_username": "docsum",
    "kafka_sasl_password": PASSWORD,
}


@pytest.fixture
def client_cert(tmp_path: Path) -> tuple[str, str]:
    """A self-signed client certificate and its private key, encrypted with PASSWORD (PEM files)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "docsum")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = tmp_path / "client.pem", tmp_path / "client.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    return str(certfile), str(keyfile)


def test_plaintext_is_the_default_and_carries_no_credentials() -> None:
    options = client_options(Settings(kafka_bootstrap_servers="broker-1:9092,broker-2:9092"))
    assert options == {"bootstrap_servers": "broker-1:9092,broker-2:9092", "security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_passes_the_mechanism_and_the_credentials(mechanism: str) -> None:
    settings = Settings(kafka_security_protocol="SASL_PLAINTEXT", **{**SASL, "kafka_sasl_mechanism": mechanism})
    options = client_options(settings)
    assert options == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "docsum",
        "sasl_plain_password": PASSWORD,
    }


def test_ssl_verifies_the_broker_with_the_given_ca() -> None:
    options = client_options(Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=certifi.where()))
    assert set(options) == {"bootstrap_servers", "security_protocol", "ssl_context"}
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0


def test_sasl_ssl_has_both_and_loads_the_client_certificate(client_cert: tuple[str, str]) -> None:
    certfile, keyfile = client_cert
    tls: dict[str, Any] = {"kafka_ssl_certfile": certfile, "kafka_ssl_keyfile": keyfile}
    options = client_options(
        Settings(kafka_security_protocol="SASL_SSL", kafka_ssl_key_password=PASSWORD, **tls, **SASL)
    )
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512" and options["sasl_plain_password"] == PASSWORD
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    # The key's password is used: a wrong one fails when the options are made, not at the first send.
    with pytest.raises(ssl.SSLError):
        client_options(Settings(kafka_security_protocol="SSL", kafka_ssl_key_password="not-it", **tls))


@pytest.mark.parametrize(
    ("given", "setting", "problem"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "DOCSUM_KAFKA_SASL_MECHANISM", "SASL_SSL needs it"),
        (
            {"kafka_security_protocol": "SASL_PLAINTEXT", **{**SASL, "kafka_sasl_password": None}},
            "DOCSUM_KAFKA_SASL_PASSWORD",
            "SASL_PLAINTEXT needs it",
        ),
        ({"kafka_sasl_password": PASSWORD}, "DOCSUM_KAFKA_SASL_PASSWORD", "PLAINTEXT uses no SASL"),
        ({"kafka_ssl_keyfile": "client.key"}, "DOCSUM_KAFKA_SSL_CERTFILE", "DOCSUM_KAFKA_SSL_KEYFILE needs it"),
        ({"kafka_security_protocol": "TLS"}, "DOCSUM_KAFKA_SECURITY_PROTOCOL", "'SASL_SSL'"),
    ],
)
def test_settings_that_cannot_work_name_the_one_to_fix(given: dict[str, Any], setting: str, problem: str) -> None:
    with pytest.raises(ValidationError) as failed:
        Settings(**given)
    named, message = bad_setting(Settings, failed.value)
    assert named == setting and problem in message
    assert PASSWORD not in str(failed.value)  # the raw error shows no input either


def test_secrets_stay_out_of_reprs_dumps_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(kafka_security_protocol="SASL_PLAINTEXT", kafka_ssl_key_password=PASSWORD, **SASL)
    with caplog.at_level(logging.INFO):
        logging.getLogger("docsum.test").info("settings: %s / %r", settings, settings)
    shown = [repr(settings), str(settings), settings.model_dump_json(), str(settings.model_dump()), caplog.text]
    assert all(PASSWORD not in text for text in shown)
    assert "**********" in caplog.text


def test_a_service_refuses_incomplete_kafka_security_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSUM_KAFKA_SASL_PASSWORD", PASSWORD)
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as ended:
            service_settings("parser", ParserSettings)
    finally:
        get_settings.cache_clear()
    assert str(ended.value) == (
        "docsum-parser: bad setting DOCSUM_KAFKA_SASL_PASSWORD: "
        "set, but DOCSUM_KAFKA_SECURITY_PROTOCOL=PLAINTEXT uses no SASL"
    )
