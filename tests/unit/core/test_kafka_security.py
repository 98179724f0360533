"""What Spark users write for a secured cluster (JAAS entries, Java key and trust stores), as
librdkafka settings: every mapping, and every refusal naming the option and what to set
instead, without quoting a value."""

from __future__ import annotations

import pytest

from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import ClientRole
from backlog_source.core.kafka_options import kafka_client_config
from backlog_source.core.kafka_security import translate_security, unreadable_material

SECRET = "s3cr3t-Value"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def translated(store_kind=lambda location: None, **options) -> dict[str, str]:
    left = dict(options)
    out = {name: value for name, (value, _) in translate_security(left, store_kind).items()}
    assert not set(left) & {"sasl.jaas.config", "ssl.keystore.type", "ssl.truststore.type",
                            "ssl.truststore.location", "ssl.truststore.certificates"}
    return {**left, **out}


def refused(**options) -> str:
    with pytest.raises(ConfigError) as raised:
        translate_security(dict(options), lambda location: None)
    message = str(raised.value)
    assert SECRET not in message
    return message


def jaas(module: str, **args: str) -> str:
    return f"{module} required " + " ".join(f'{k}="{v}"' for k, v in args.items()) + ";"


# ---------------------------------------------------------------- SASL


@pytest.mark.parametrize("module", ["org.apache.kafka.common.security.plain.PlainLoginModule",
                                    "org.apache.kafka.common.security.scram.ScramLoginModule"])
def test_plain_and_scram_entries_become_username_and_password(module):
    out = translated(**{"sasl.jaas.config": jaas(module, username="bob", password=SECRET)})
    assert out == {"sasl.username": "bob", "sasl.password": SECRET}


def test_a_jaas_value_may_hold_escaped_quotes_and_the_entry_needs_no_final_semicolon():
    raw = 'x.ScramLoginModule required username="bob" password="a\\"b"'
    assert translated(**{"sasl.jaas.config": raw})["sasl.password"] == 'a"b'


def test_plain_without_a_password_is_refused_naming_what_it_needs():
    message = refused(**{"sasl.jaas.config": jaas("x.PlainLoginModule", username="bob")})
    assert "PlainLoginModule needs username=\"...\" and password=\"...\"" in message


def test_an_unparsable_entry_is_refused_without_quoting_it():
    message = refused(**{"sasl.jaas.config": f"password={SECRET}"})
    assert message.startswith("option 'kafka.sasl.jaas.config' must be one login module entry")


def test_kafkas_unsecured_oauthbearer_login_is_librdkafkas_unsecured_jwt():
    out = translated(**{"sasl.jaas.config": jaas(OAUTH_MODULE, unsecuredLoginStringClaim_sub="svc")})
    assert out == {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": "principal=svc"}


def test_every_unsecured_login_option_librdkafka_has_is_mapped():
    raw = jaas(OAUTH_MODULE, unsecuredLoginPrincipalClaimName="azp", unsecuredLoginStringClaim_azp="svc",
               unsecuredLoginScopeClaimName="roles", unsecuredLoginListClaim_roles="|r1|r2",
               unsecuredLoginLifetimeSeconds="600", unsecuredLoginExtension_traceId="123")
    assert translated(**{"sasl.jaas.config": raw})["sasl.oauthbearer.config"] == (
        "principal=svc principalClaimName=azp scopeClaimName=roles scope=r1,r2 lifeSeconds=600 extension_traceId=123")


@pytest.mark.parametrize("args, says", [
    ({"unsecuredLoginLifetimeSeconds": "60"}, 'needs unsecuredLoginStringClaim_sub="<principal>"'),
    ({"unsecuredLoginStringClaim_sub": "svc", "unsecuredLoginNumberClaim_iat": "1"},
     "unsecuredLoginNumberClaim_iat not supported"),
    ({"unsecuredLoginStringClaim_sub": "two words"}, "cannot hold white space"),
])
def test_unsecured_login_options_librdkafka_lacks_are_refused(args, says):
    assert says in refused(**{"sasl.jaas.config": jaas(OAUTH_MODULE, **args)})


def test_oauthbearer_client_credentials_become_librdkafkas_oidc_settings():
    out = translated(**{
        "sasl.jaas.config": jaas(OAUTH_MODULE, clientId="app", clientSecret=SECRET, scope="kafka",
                                 extension_logicalCluster="lkc-1", extension_identityPoolId="pool-2"),
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
    })
    assert out == {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app",
                   "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.scope": "kafka",
                   "sasl.oauthbearer.extensions": "identityPoolId=pool-2,logicalCluster=lkc-1",
                   "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}


def test_kafka_4_1_client_credentials_options_are_mapped_and_the_endpoint_implies_oidc():
    out = translated(**{
        "sasl.oauthbearer.client.credentials.client.id": "app",
        "sasl.oauthbearer.client.credentials.client.secret": SECRET,
        "sasl.oauthbearer.jwt.retriever.class":
            "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
    })
    assert out == {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app",
                   "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}


@pytest.mark.parametrize("options, says", [
    ({"sasl.jaas.config": jaas(OAUTH_MODULE, clientId="app", clientSecret=SECRET)},
     "needs either kafka.sasl.oauthbearer.token.endpoint.url"),
    ({"sasl.jaas.config": jaas(OAUTH_MODULE, clientId="app", clientSecret=SECRET, ssl="x"),
      "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}, "OAuthBearerLoginModule's ssl not supported"),
    ({"sasl.oauthbearer.token.endpoint.url": "file:///var/token"}, "not supported with a file: URL"),
    ({"sasl.login.callback.handler.class": "com.example.MyHandler"},
     "option 'kafka.sasl.login.callback.handler.class' is not supported: it names a Java class"),
    ({"sasl.oauthbearer.jwt.retriever.class": "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever"},
     "option 'kafka.sasl.oauthbearer.jwt.retriever.class' is not supported"),
    ({"sasl.client.callback.handler.class": "com.example.X"}, "option 'kafka.sasl.client.callback.handler.class'"),
    ({"ssl.engine.factory.class": "com.example.Engine"},
     "option 'kafka.ssl.engine.factory.class' is not supported: it names a Java class, and this source reads "
     "through librdkafka, which cannot run it. See docs/security.md"),
    ({"sasl.jaas.config": jaas("com.sun.security.auth.module.Krb5LoginModule", keyTab="/k", principal="p")},
     "set kafka.sasl.mechanism=GSSAPI, kafka.sasl.kerberos.keytab"),
    ({"sasl.jaas.config": jaas("com.example.CustomLoginModule", password=SECRET)},
     "names the login module 'com.example.CustomLoginModule', which librdkafka does not implement"),
])
def test_oauthbearer_and_login_settings_without_a_librdkafka_twin_are_refused(options, says):
    assert says in refused(**options)


# ---------------------------------------------------------------- key stores (mutual TLS)


def test_a_pkcs12_key_store_is_librdkafkas_keystore_under_the_same_names():
    options = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/c.p12", "ssl.keystore.password": SECRET}
    assert translated(**options) == {"ssl.keystore.location": "/c.p12", "ssl.keystore.password": SECRET}


def test_a_pem_key_store_file_is_read_as_the_certificate_and_the_key():
    options = {"ssl.keystore.type": "PEM", "ssl.keystore.location": "/c.pem", "ssl.key.password": SECRET}
    assert translated(**options) == {"ssl.certificate.location": "/c.pem", "ssl.key.location": "/c.pem",
                                     "ssl.key.password": SECRET}


def test_pem_key_store_strings_are_librdkafkas_pem_settings():
    options = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----",
               "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}
    assert translated(**options) == {"ssl.certificate.pem": "-----BEGIN CERTIFICATE-----",
                                     "ssl.key.pem": "-----BEGIN PRIVATE KEY-----"}


@pytest.mark.parametrize("declared, content", [("JKS", None), ("", "JKS"), ("PKCS12", "JCEKS"), ("JCEKS", None)])
def test_a_java_key_store_is_refused_with_how_to_convert_it(declared, content):
    options = {"ssl.keystore.location": "/c.jks", "ssl.keystore.password": SECRET}
    if declared:
        options["ssl.keystore.type"] = declared
    with pytest.raises(ConfigError) as raised:
        translate_security(options, lambda location: content)
    message = str(raised.value)
    assert message.startswith(f"option 'kafka.ssl.keystore.location' is not supported for a {content or declared} "
                              "key store: librdkafka reads a client key store as a PKCS#12 file"), message
    assert "keytool -importkeystore" in message and "-deststoretype PKCS12" in message and SECRET not in message


def test_a_key_store_without_a_type_that_is_pkcs12_is_read_as_java_would():
    options = {"ssl.keystore.location": "/c.p12", "ssl.keystore.password": SECRET}
    assert translated(**options) == options


def test_the_file_is_told_from_its_magic_number(tmp_path):
    from backlog_source.core.kafka_security import _store_kind

    (tmp_path / "a.jks").write_bytes(b"\xfe\xed\xfe\xed....")
    (tmp_path / "b.p12").write_bytes(b"\x30\x82\x0a\x00")
    assert _store_kind(str(tmp_path / "a.jks")) == "JKS"
    assert _store_kind(str(tmp_path / "b.p12")) is None and _store_kind(str(tmp_path / "none")) is None


# ---------------------------------------------------------------- trust stores


def test_a_pem_trust_store_is_librdkafkas_ca_location():
    options = {"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    assert translated(**options) == {"ssl.ca.location": "/ca.pem"}


def test_pem_trust_store_certificates_are_librdkafkas_ca_pem():
    options = {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----"}
    assert translated(**options) == {"ssl.ca.pem": "-----BEGIN CERTIFICATE-----"}


@pytest.mark.parametrize("options, option", [
    ({"ssl.truststore.location": "/t.jks", "ssl.truststore.password": SECRET}, "ssl.truststore.location"),
    ({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/t.p12"}, "ssl.truststore.location"),
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type"),
    ({"ssl.truststore.password": SECRET}, "ssl.truststore.password"),
])
def test_a_java_trust_store_is_refused_with_how_to_export_its_ca(options, option):
    message = refused(**options)
    assert message.startswith(f"option 'kafka.{option}' is not supported"), message
    assert "keytool -exportcert -rfc" in message and "kafka.ssl.truststore.type=PEM" in message


def test_javas_empty_endpoint_identification_is_librdkafkas_none():
    assert translated(**{"ssl.endpoint.identification.algorithm": ""}) == {
        "ssl.endpoint.identification.algorithm": "none"}
    assert translated(**{"ssl.endpoint.identification.algorithm": "https"}) == {
        "ssl.endpoint.identification.algorithm": "https"}


# ---------------------------------------------------------------- through kafka_client_config


def test_secrets_of_mapped_options_are_held_masked_and_revealed_only_to_the_client():
    client = kafka_client_config({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                                  "sasl.mechanism": "OAUTHBEARER",
                                  "sasl.jaas.config": jaas(OAUTH_MODULE, clientId="app", clientSecret=SECRET),
                                  "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
                                 group_id_prefix="g")
    assert "sasl.oauthbearer.client.secret" in client.secrets and SECRET not in repr(client)
    assert client.params["sasl.oauthbearer.client.id"] == "app"
    assert client.librdkafka(ClientRole.ADMIN)["sasl.oauthbearer.client.secret"] == SECRET


def test_an_unreadable_key_store_fails_at_load_leading_with_the_cause(tmp_path):
    store = tmp_path / "client.p12"
    store.write_bytes(b"\x30\x82 not really pkcs12")
    with pytest.raises(ConfigError) as raised:
        kafka_client_config({"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                             "ssl.keystore.location": str(store), "ssl.keystore.password": SECRET},
                            group_id_prefix="g")
    message = str(raised.value)
    assert message.startswith("TLS key store not readable: option 'kafka.ssl.keystore.location' could not be used "
                              "(a wrong kafka.ssl.keystore.password, or not a PKCS#12 file): "), message
    assert SECRET not in message


def test_unreadable_material_names_the_option_as_written():
    text = "Failed to create consumer: ssl.key.location failed: error:0A080009:SSL routines::PEM lib"
    assert unreadable_material(text, {"ssl.key.location": "ssl.keystore.location"}).startswith(
        "TLS private key not readable: option 'kafka.ssl.keystore.location' could not be used (a wrong "
        "kafka.ssl.key.password")
    assert unreadable_material("No such configuration property", {}) is None
