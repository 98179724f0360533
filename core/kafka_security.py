"""Spark users' security options (JAAS, Java keystores and truststores), as librdkafka settings.

Spark's Kafka source hands ``kafka.*`` options to the Java client; a user of a secured
cluster writes its credentials as a JAAS entry (``kafka.sasl.jaas.config``) and its
certificates as Java key and trust stores. librdkafka takes plain settings and reads
certificates as PEM, or a client key as a PKCS#12 file. :func:`translate_security` maps
every such option that has a librdkafka meaning and refuses, naming the option and what to
set instead, the ones that have none (a JKS store, a Java callback class, a JAAS login
module librdkafka does not implement): dropping them would change how the client
authenticates or whom it trusts.

Runs on the driver, at ``load()``, inside :func:`~backlog_source.core.kafka_options.kafka_client_config`.
No message quotes an option's value: a JAAS entry, a key or a password is a secret.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path

from backlog_source.core.errors import ConfigError

#: librdkafka name -> (value, the ``kafka.*`` option it was written as, without the prefix).
Translated = dict[str, tuple[str, str]]

_JAAS_LOGIN = re.compile(r"""(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*"""
                         r"""(?P<args>.*?);?\s*$""", re.DOTALL)
_JAAS_ARG = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))""")

#: The Java login callback handler Kafka's OIDC (client credentials) login uses: librdkafka's
#: ``sasl.oauthbearer.method=oidc`` does what it does. Any other class cannot run here.
_OIDC_CALLBACK_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
})
#: Kafka 4.1's JWT retrievers that fetch a token with the client credentials grant.
_CLIENT_CREDENTIALS_RETRIEVERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever",
    "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever",
})
#: Java-only classes: each would replace part of the login with code librdkafka cannot run.
_JAVA_CLASSES = ("sasl.login.callback.handler.class", "sasl.client.callback.handler.class", "sasl.login.class",
                 "sasl.oauthbearer.jwt.retriever.class", "ssl.engine.factory.class")
#: Kafka 4.1's names of the client credentials -> librdkafka's.
_CLIENT_CREDENTIALS = {
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}
_JKS_MAGIC = {b"\xfe\xed\xfe\xed": "JKS", b"\xce\xce\xce\xce": "JCEKS"}
_PEM_OR_PKCS12 = "a PKCS#12 file (kafka.ssl.keystore.type=PKCS12) or PEM files"
_TO_PKCS12 = ("convert it with 'keytool -importkeystore -srckeystore <store> -destkeystore <store>.p12 "
              "-deststoretype PKCS12', or set kafka.ssl.keystore.type=PEM with the certificate chain and key in PEM")
_TO_PEM_CA = ("export the CA with 'keytool -exportcert -rfc -keystore <truststore> -alias <alias> -file ca.pem' and "
              "set kafka.ssl.truststore.type=PEM and kafka.ssl.truststore.location to that file (or "
              "kafka.ssl.ca.location, librdkafka's name)")


def translate_security(options: MutableMapping[str, str],
                       store_kind: Callable[[str], str | None] | None = None) -> Translated:
    """Remove from ``options`` (``kafka.*`` keys without the prefix) the Java security options
    and return their librdkafka settings. ``store_kind`` tells a key store file's format from
    its first bytes (``"JKS"``, ``"JCEKS"``, None when not a Java store or unreadable);
    replaced by unit tests only. Raises :class:`ConfigError` naming the option it refuses and
    what to set instead; never quotes a value."""
    store_kind = store_kind or _store_kind
    out: Translated = {}
    _check_java_classes(options)
    if "sasl.jaas.config" in options:
        out.update(_jaas(options.pop("sasl.jaas.config"), options))
    for java, name in _CLIENT_CREDENTIALS.items():
        if java in options:
            out[name] = (options.pop(java), java)
    endpoint = options.get("sasl.oauthbearer.token.endpoint.url", "")
    if endpoint.lower().startswith("file:"):
        raise ConfigError("option 'kafka.sasl.oauthbearer.token.endpoint.url' is not supported with a file: URL "
                          "(a token read from a file): librdkafka fetches OAUTHBEARER tokens from an https:// "
                          "token endpoint with a client id and secret")
    if endpoint and "sasl.oauthbearer.method" not in options:
        out.setdefault("sasl.oauthbearer.method", ("oidc", "sasl.oauthbearer.token.endpoint.url"))
    out.update(_keystore(options, store_kind))
    out.update(_truststore(options))
    if options.get("ssl.endpoint.identification.algorithm") == "":
        # Java's "" (no host name check) is librdkafka's "none".
        options.pop("ssl.endpoint.identification.algorithm")
        out["ssl.endpoint.identification.algorithm"] = ("none", "ssl.endpoint.identification.algorithm")
    return out


def _check_java_classes(options: MutableMapping[str, str]) -> None:
    for key in _JAVA_CLASSES:
        if key not in options:
            continue
        value = options[key].strip()
        if key == "sasl.login.callback.handler.class" and value in _OIDC_CALLBACK_HANDLERS:
            del options[key]  # librdkafka's OIDC login does what it does
        elif key == "sasl.oauthbearer.jwt.retriever.class" and value in _CLIENT_CREDENTIALS_RETRIEVERS:
            del options[key]
        else:
            hint = (" For OAUTHBEARER set kafka.sasl.oauthbearer.token.endpoint.url with clientId and clientSecret "
                    "in kafka.sasl.jaas.config (OIDC client credentials), or unsecuredLoginStringClaim_sub "
                    "(unsecured tokens, for tests)") if key.startswith("sasl.") else ""
            raise ConfigError(f"option 'kafka.{key}' is not supported: it names a Java class, and this source reads "
                              f"through librdkafka, which cannot run it.{hint} See docs/security.md")


# ---------------------------------------------------------------- JAAS


def _jaas(raw: str, options: MutableMapping[str, str]) -> Translated:
    match = _JAAS_LOGIN.match(raw.strip())
    if not match:
        raise ConfigError(
            "option 'kafka.sasl.jaas.config' must be one login module entry, '<LoginModule class> required "
            'name="value" ...;\' (e.g. ScramLoginModule with username="..." and password="..."); or set '
            "'kafka.sasl.username' and 'kafka.sasl.password' directly")
    module = match.group("module").rsplit(".", 1)[-1]
    args = {name: quoted.replace('\\"', '"').replace("\\\\", "\\") if quoted or not bare else bare
            for name, quoted, bare in _JAAS_ARG.findall(match.group("args"))}
    if module in ("PlainLoginModule", "ScramLoginModule"):
        if "username" not in args or "password" not in args:
            raise ConfigError(f"option 'kafka.sasl.jaas.config': {module} needs username=\"...\" and "
                              'password="..." (only those two are used)')
        return {"sasl.username": (args["username"], "sasl.jaas.config"),
                "sasl.password": (args["password"], "sasl.jaas.config")}
    if module == "OAuthBearerLoginModule":
        if any(name.startswith("unsecuredLogin") for name in args):
            return _unsecured_jwt(args)
        return _oidc(args, options)
    if module == "Krb5LoginModule":
        raise ConfigError(
            "option 'kafka.sasl.jaas.config' with Krb5LoginModule is not supported: librdkafka logs in to "
            "Kerberos itself (it runs kinit); set kafka.sasl.mechanism=GSSAPI, kafka.sasl.kerberos.keytab (the "
            "keyTab), kafka.sasl.kerberos.principal (the principal) and kafka.sasl.kerberos.service.name instead")
    raise ConfigError(
        f"option 'kafka.sasl.jaas.config' names the login module {match.group('module')!r}, which librdkafka "
        "does not implement: PlainLoginModule and ScramLoginModule (username, password) and "
        "OAuthBearerLoginModule (OIDC client credentials, or unsecured tokens for tests) are supported")


def _unsecured_jwt(args: dict[str, str]) -> Translated:
    """Kafka's unsecured OAUTHBEARER login (``unsecuredLogin*`` JAAS options) as librdkafka's
    ``enable.sasl.oauthbearer.unsecure.jwt`` and ``sasl.oauthbearer.config``."""
    principal_claim = args.pop("unsecuredLoginPrincipalClaimName", "sub")
    scope_claim = args.pop("unsecuredLoginScopeClaimName", "scope")
    principal = args.pop(f"unsecuredLoginStringClaim_{principal_claim}", None)
    if not principal:
        raise ConfigError(f"option 'kafka.sasl.jaas.config': OAuthBearerLoginModule's unsecured login needs "
                          f"unsecuredLoginStringClaim_{principal_claim}=\"<principal>\"")
    config = {"principal": principal}
    if principal_claim != "sub":
        config["principalClaimName"] = principal_claim
    if scope_claim != "scope":
        config["scopeClaimName"] = scope_claim
    scope = args.pop(f"unsecuredLoginListClaim_{scope_claim}", None)
    if scope:
        # Java's list claim: the first character is the delimiter; librdkafka's scope is CSV.
        config["scope"] = ",".join(item for item in scope[1:].split(scope[0]) if item)
    if "unsecuredLoginLifetimeSeconds" in args:
        config["lifeSeconds"] = args.pop("unsecuredLoginLifetimeSeconds")
    for name in [name for name in args if name.startswith("unsecuredLoginExtension_")]:
        config[f"extension_{name.removeprefix('unsecuredLoginExtension_')}"] = args.pop(name)
    left = sorted(name for name in args if name.startswith("unsecuredLogin"))
    if left:
        raise ConfigError(f"option 'kafka.sasl.jaas.config': {', '.join(left)} not supported: librdkafka's "
                          "unsecured token holds the principal, the scope, the lifetime and extensions only")
    if any(re.search(r"\s", value) for value in config.values()):
        raise ConfigError("option 'kafka.sasl.jaas.config': librdkafka's unsecured token settings cannot hold "
                          "white space (the principal, scope, lifetime and extensions)")
    text = " ".join(f"{name}={value}" for name, value in config.items())
    return {"enable.sasl.oauthbearer.unsecure.jwt": ("true", "sasl.jaas.config"),
            "sasl.oauthbearer.config": (text, "sasl.jaas.config")}


def _oidc(args: dict[str, str], options: MutableMapping[str, str]) -> Translated:
    """Kafka's OAUTHBEARER login with client credentials (``clientId``, ``clientSecret``,
    ``scope``, ``extension_*`` in JAAS; the token endpoint as an option) as librdkafka's OIDC
    settings."""
    if not options.get("sasl.oauthbearer.token.endpoint.url"):
        raise ConfigError(
            "option 'kafka.sasl.jaas.config' with OAuthBearerLoginModule needs either "
            "kafka.sasl.oauthbearer.token.endpoint.url (with clientId and clientSecret in the JAAS entry: OIDC "
            'client credentials) or unsecuredLoginStringClaim_sub="<principal>" (unsecured tokens, for tests)')
    out: Translated = {"sasl.oauthbearer.method": ("oidc", "sasl.jaas.config")}
    for java, name in (("clientId", "sasl.oauthbearer.client.id"), ("clientSecret", "sasl.oauthbearer.client.secret"),
                       ("scope", "sasl.oauthbearer.scope")):
        if java in args:
            out[name] = (args.pop(java), "sasl.jaas.config")
    extensions = [f"{name.removeprefix('extension_')}={args.pop(name)}" for name in sorted(args)
                  if name.startswith("extension_")]
    if extensions:
        out["sasl.oauthbearer.extensions"] = (",".join(extensions), "sasl.jaas.config")
    if args:
        raise ConfigError(f"option 'kafka.sasl.jaas.config': OAuthBearerLoginModule's {', '.join(sorted(args))} "
                          "not supported: librdkafka's OIDC login takes clientId, clientSecret, scope and "
                          "extension_* only")
    return out


# ---------------------------------------------------------------- key and trust stores


def _keystore(options: MutableMapping[str, str], store_kind: Callable[[str], str | None]) -> Translated:
    """A Java key store (the client's certificate and key, for mutual TLS) as librdkafka's
    PKCS#12 ``ssl.keystore.location`` or PEM ``ssl.certificate.*``/``ssl.key.*``."""
    kind = options.pop("ssl.keystore.type", "").strip().upper()
    out: Translated = {}
    if "ssl.keystore.certificate.chain" in options:
        out["ssl.certificate.pem"] = (options.pop("ssl.keystore.certificate.chain"), "ssl.keystore.certificate.chain")
    if "ssl.keystore.key" in options:
        out["ssl.key.pem"] = (options.pop("ssl.keystore.key"), "ssl.keystore.key")
    location = options.get("ssl.keystore.location")
    if location is None:
        if kind and kind not in ("PEM", "PKCS12") and not out:
            raise ConfigError(f"option 'kafka.ssl.keystore.type' is not supported for a {kind} key store: librdkafka "
                              f"reads a client key store as {_PEM_OR_PKCS12}")
        return out
    if kind == "PEM":
        # One file with the private key and the certificate chain: OpenSSL reads each from it.
        options.pop("ssl.keystore.location")
        options.pop("ssl.keystore.password", None)  # a PEM key store has none (the key's is ssl.key.password)
        out["ssl.certificate.location"] = (location, "ssl.keystore.location")
        out["ssl.key.location"] = (location, "ssl.keystore.location")
        return out
    java = store_kind(location) or (kind if kind in ("JKS", "JCEKS") else None)
    if java or kind not in ("", "PKCS12"):
        raise ConfigError(f"option 'kafka.ssl.keystore.location' is not supported for a {java or kind} key store: "
                          f"librdkafka reads a client key store as {_PEM_OR_PKCS12}; {_TO_PKCS12}")
    return out  # a PKCS#12 file: librdkafka's ssl.keystore.location and ssl.keystore.password, same names


def _truststore(options: MutableMapping[str, str]) -> Translated:
    """A Java trust store (the CAs that sign the brokers' certificates) as librdkafka's
    ``ssl.ca.location`` or ``ssl.ca.pem``: PEM only."""
    kind = options.pop("ssl.truststore.type", "").strip().upper()
    out: Translated = {}
    if "ssl.truststore.certificates" in options:
        out["ssl.ca.pem"] = (options.pop("ssl.truststore.certificates"), "ssl.truststore.certificates")
    location = options.pop("ssl.truststore.location", None)
    if location is not None:
        if kind != "PEM":
            raise ConfigError(f"option 'kafka.ssl.truststore.location' is not supported for a {kind or 'JKS'} "
                              f"trust store: librdkafka reads CA certificates as PEM; {_TO_PEM_CA}")
        out["ssl.ca.location"] = (location, "ssl.truststore.location")
    elif kind and kind != "PEM" and not out:
        raise ConfigError(f"option 'kafka.ssl.truststore.type' is not supported for a {kind} trust store: librdkafka "
                          f"reads CA certificates as PEM; {_TO_PEM_CA}")
    if "ssl.truststore.password" in options:
        if kind != "PEM" and not out:
            raise ConfigError(f"option 'kafka.ssl.truststore.password' is not supported: librdkafka reads CA "
                              f"certificates as PEM; {_TO_PEM_CA}")
        options.pop("ssl.truststore.password")  # a PEM trust store has no password
    return out


def _store_kind(location: str) -> str | None:
    """``"JKS"`` or ``"JCEKS"`` when the file at ``location`` is a Java key store (by its
    magic number), else None (PKCS#12, PEM, or not readable here: librdkafka will say)."""
    try:
        with Path(location).open("rb") as file:
            return _JKS_MAGIC.get(file.read(4))
    except OSError:
        return None


#: What librdkafka could not read when it names one of these settings while a client is
#: built (a wrong password, a file in another format), by the setting it names.
_UNREADABLE = {
    "ssl.keystore.location": ("TLS key store not readable",
                              "a wrong kafka.ssl.keystore.password, or not a PKCS#12 file"),
    "ssl.key.location": ("TLS private key not readable", "a wrong kafka.ssl.key.password, or not a PEM private key"),
    "ssl.key.pem": ("TLS private key not readable", "a wrong kafka.ssl.key.password, or not a PEM private key"),
    "ssl.certificate.location": ("TLS client certificate not readable", "not a PEM certificate chain"),
    "ssl.certificate.pem": ("TLS client certificate not readable", "not a PEM certificate chain"),
    "ssl.ca.location": ("TLS CA certificates not readable", "not a PEM file, or no such file"),
    "ssl.ca.pem": ("TLS CA certificates not readable", "not PEM certificates"),
}
_NAMED_SETTING = re.compile(r"\b(ssl\.[a-z.]+[a-z])")


def unreadable_material(text: str, written_as: Mapping[str, str]) -> str | None:
    """The message, cause first, for librdkafka's ``text`` when it could not read a key, a
    certificate or a store a setting names (``written_as``: librdkafka name -> the option as
    the user wrote it); None when ``text`` is about something else. ``text`` must hold no
    secret (librdkafka names files, not their passwords)."""
    for name in _NAMED_SETTING.findall(text):
        if name in _UNREADABLE:
            cause, likely = _UNREADABLE[name]
            return f"{cause}: option 'kafka.{written_as.get(name, name)}' could not be used ({likely}): {text}"
    return None
