"""A secured Apache Kafka: SASL (PLAIN and SCRAM-SHA-256), TLS and ACLs. The right
credentials read; wrong ones, an untrusted CA and ACLs that refuse the control topic each
fail with an error that leads with its cause and names what to fix; no secret appears in any
output (driver and worker logs at DEBUG, ``explain()``, the progress, Spark's event log, the
checkpoint, the control topic, span attributes).

One broker for the module: a PLAINTEXT listener for the tests' own admin work (its principal,
ANONYMOUS, is a super user), a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-256, an SSL
listener whose certificate keytool makes here (self-signed; its PEM is the right CA, another
self-signed certificate the wrong one), and Kafka's StandardAuthorizer with
``allow.everyone.if.no.acl.found=false``: a principal may do only what an ACL grants it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from backlog_source.core.buckets import Bucket
from backlog_source.core.kafka_refusals import AccessRefusedError, Refusal
from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import KafkaCluster, kafka
from backlog_source.demo.otlp_receiver import OtlpReceiver
from backlog_source.enumerator.kafka_admin import KafkaAdmin
from backlog_source.events.control_topic import ControlTopic
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from tests.integration.helpers import make_topic, wait_for
from tests.reliability.test_secrets import assert_no_secret, control_topic, everything_written, run

pytestmark = pytest.mark.integration

USER = "svc"  # PLAIN, a super user: runs the query end to end
READER = "reader"  # SCRAM-SHA-256, granted what an ingestion job normally gets
DESCRIBER = "describer"  # SCRAM-SHA-256, granted DESCRIBE only


@dataclass
class Secured:
    cluster: KafkaCluster
    password: str  # USER's
    reader_password: str  # READER's and DESCRIBER's
    ca: Path  # the PEM the SSL listener's certificate is verified with
    wrong_ca: Path  # a CA that did not sign it

    @property
    def bootstrap_servers(self) -> str:
        """The SASL listener, what the job's clients dial (``run`` reads this)."""
        return self.cluster.listener("SASL_PLAINTEXT")


def keytool() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "keytool") if java_home else shutil.which("keytool")
    assert found and Path(found).exists(), "keytool (the JDK's) is needed to stage the TLS listener"
    return found


def self_signed(folder: Path, name: str, store_password: str) -> tuple[Path, Path]:
    """A PKCS#12 key store holding a self-signed certificate for 127.0.0.1, and its PEM."""
    store, pem = folder / f"{name}.p12", folder / f"{name}.pem"
    common = ["-alias", name, "-keystore", str(store), "-storetype", "PKCS12", "-storepass", store_password]
    subprocess.run([keytool(), "-genkeypair", *common, "-keyalg", "RSA", "-keysize", "2048", "-validity", "2",
                    "-dname", f"CN={name}", "-ext", "SAN=IP:127.0.0.1,DNS:localhost", "-keypass", store_password],
                   check=True, capture_output=True, timeout=60)
    subprocess.run([keytool(), "-exportcert", "-rfc", *common, "-file", str(pem)], check=True, capture_output=True,
                   timeout=60)
    return store, pem


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    store_password = f"store-{uuid.uuid4().hex}"
    keystore, ca = self_signed(folder, "broker", store_password)
    _, wrong_ca = self_signed(folder, "stranger", store_password)
    admin, password, reader_password = (f"{who}-{uuid.uuid4().hex}" for who in ("admin", "right", "scram"))
    plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             f'username="admin" password="{admin}" user_admin="{admin}" user_{USER}="{password}";')
    listeners = {
        "SASL_PLAINTEXT": {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                           "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain,
                           "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                               "org.apache.kafka.common.security.scram.ScramLoginModule required;"},
        "SSL": {"listener.name.ssl.ssl.keystore.location": str(keystore),
                "listener.name.ssl.ssl.keystore.type": "PKCS12",
                "listener.name.ssl.ssl.keystore.password": store_password,
                "listener.name.ssl.ssl.key.password": store_password},
    }
    settings = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "allow.everyone.if.no.acl.found": "false",
                "super.users": f"User:ANONYMOUS;User:admin;User:{USER}"}
    with kafka(listeners=listeners, settings=settings) as cluster:
        add_scram_user(cluster, READER, reader_password)
        add_scram_user(cluster, DESCRIBER, reader_password)
        yield Secured(cluster, password, reader_password, ca, wrong_ca)


def add_scram_user(cluster: KafkaCluster, user: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          password.encode())
    for done in admin.alter_user_scram_credentials([upsert]).values():
        done.result(timeout=30)

    def known() -> bool:
        try:
            return bool(admin.describe_user_scram_credentials([user])[user].result(timeout=10).scram_credential_infos)
        except KafkaException:  # RESOURCE_NOT_FOUND: not yet in the broker's metadata
            return False

    wait_for(known, 30, f"the SCRAM credentials of {user}")


def grant_ingestion_acls(cluster: KafkaCluster, user: str, topic: str,
                         operations=(AclOperation.READ, AclOperation.DESCRIBE)) -> None:
    """What an ingestion job normally gets: READ and DESCRIBE on its topic (``operations``),
    READ on the groups Spark's Kafka source names (``spark-kafka-source*``). Nothing on the
    control topic."""
    principal = f"User:{user}"
    allow = AclPermissionType.ALLOW
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", operation, allow)
                for operation in operations]
    bindings.append(AclBinding(ResourceType.GROUP, "spark-kafka-source", ResourcePatternType.PREFIXED, principal, "*",
                               AclOperation.READ, allow))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for done in admin.create_acls(bindings).values():
        done.result(timeout=30)
    mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                            AclPermissionType.ANY)
    wait_for(lambda: len(admin.describe_acls(mine).result(timeout=10)) >= len(bindings), 30, f"the ACLs of {user}")


def plain_options(password: str) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                      f'username="{USER}" password="{password}";',
            "kafka.default.api.timeout.ms": "5000"}


def scram_options(password: str, user: str = READER) -> dict[str, str]:
    return {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                      f'username="{user}" password="{password}";',
            "kafka.default.api.timeout.ms": "5000"}


def tls_options(ca: Path) -> dict[str, str]:
    return {"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": str(ca), "kafka.default.api.timeout.ms": "5000"}


def query_start(servers: str, topic: str, options: dict[str, str]):
    """What a query's start asks Kafka first, in the driver's planner: the control topic
    opened through the source's admin client. Returns the client and the control topic."""
    settings = parse_options({"kafka.bootstrap.servers": servers, "subscribe": topic, **options}, read="stream")
    admin = KafkaAdmin.from_settings(settings)
    return admin, ControlTopic(settings, admin)


def test_sasl_plain_right_and_wrong_credentials_and_no_secret_anywhere(secured, topic_name, tmp_path):
    password, wrong = secured.password, f"wrong-{uuid.uuid4().hex}"
    make_topic(secured.cluster, topic_name, 2, per_partition=2_000)  # through PLAINTEXT, as an admin would
    with OtlpReceiver() as receiver:
        ok_output = run(secured, topic_name, tmp_path / "ok", plain_options(password), "drain", receiver)
        assert "LAST PROGRESS" in ok_output
        last = json.loads(ok_output.split("LAST PROGRESS: ", 1)[1].splitlines()[0])
        assert json.loads(last["sources"][0]["endOffset"])["positions"][topic_name] == {"0": 2_000, "1": 2_000}

        bad_output = run(secured, topic_name, tmp_path / "bad", plain_options(wrong), "fail", receiver)
        assert "QUERY FAILED" in bad_output
        failure = bad_output.split("QUERY FAILED", 1)[1]
        # The cause first, then the options to check (it read "refused describing the subscribed topics").
        assert re.search(r"AccessRefusedError: authentication failed: Kafka at \S+ refused the credentials of "
                         rf"principal User:{USER} \(.*SASL authentication error", failure), failure[-4000:]
        assert "kafka.sasl.jaas.config" in failure
        spans = json.dumps(receiver.spans)
    events = control_topic(secured.cluster)
    assert '"backlog.phase"' in spans and "BacklogFinishEvent" in events  # the search saw real outputs
    assert_no_secret([password, wrong], driver_and_worker_logs=ok_output + bad_output,
                     checkpoint_sink_and_event_log=everything_written(tmp_path), span_attributes=spans,
                     control_topic_events=events)


def test_a_principal_without_rights_on_the_control_topic_is_told_which_acls_to_grant(secured, topic_name,
                                                                                    tmp_path):
    """Issue 46: READ and DESCRIBE on its topic, READ on ``spark-kafka-source*`` (what
    ``format("kafka")`` needs) and nothing on ``_backlog_events``: the query failed at start
    with "refused describing the subscribed topics", though its topic was describable."""
    make_topic(secured.cluster, topic_name, 1, per_partition=100)
    grant_ingestion_acls(secured.cluster, READER, topic_name)
    admin, _ = query_start(secured.bootstrap_servers, topic_name, scram_options(secured.reader_password))
    assert admin.describe_topics([topic_name])[topic_name].partitions == 1  # its own topic: granted

    with OtlpReceiver() as receiver:
        output = run(secured, topic_name, tmp_path / "reader", scram_options(secured.reader_password), "fail",
                     receiver)
    assert "QUERY FAILED" in output
    failure = output.split("QUERY FAILED", 1)[1]
    assert re.search(r"ControlTopicError: authorization refused for topic '_backlog_events', the control topic "
                     r"\(option 'backlog.eventsTopic'\): Kafka at \S+ does not allow principal User:reader \w+ on it",
                     failure), failure[-4000:]
    assert (f"Grant principal User:{READER} DESCRIBE, READ and WRITE on topic '_backlog_events', and CREATE on it "
            "unless it is created beforehand (1 partition)") in failure
    assert "subscribed topics" not in failure
    assert_no_secret([secured.reader_password], driver_and_worker_logs=output)


def test_a_wrong_scram_password_fails_leading_with_the_authentication_failure(secured, topic_name):
    make_topic(secured.cluster, topic_name, 1)
    grant_ingestion_acls(secured.cluster, READER, topic_name)
    admin, _ = query_start(secured.bootstrap_servers, topic_name, scram_options(secured.reader_password))
    assert topic_name in admin.describe_topics([topic_name])  # the right password connects

    wrong = f"wrong-{uuid.uuid4().hex}"
    _, control = query_start(secured.bootstrap_servers, topic_name, scram_options(wrong))
    with pytest.raises(AccessRefusedError) as raised:
        control.open()
    message = str(raised.value)
    assert raised.value.refusal is Refusal.AUTHENTICATION
    assert message.startswith(f"authentication failed: Kafka at {secured.bootstrap_servers} refused the credentials "
                              f"of principal User:{READER} ("), message
    assert "SCRAM-SHA-256" in message and "kafka.sasl.jaas.config" in message and "Timed out" not in message
    assert wrong not in message and secured.reader_password not in message


def test_a_wrong_ca_fails_leading_with_the_untrusted_certificate(secured, topic_name):
    make_topic(secured.cluster, topic_name, 1)
    servers = secured.cluster.listener("SSL")
    admin, _ = query_start(servers, topic_name, tls_options(secured.ca))
    assert topic_name in admin.describe_topics([topic_name])  # the right CA connects

    _, control = query_start(servers, topic_name, tls_options(secured.wrong_ca))
    with pytest.raises(AccessRefusedError) as raised:
        control.open()
    message = str(raised.value)
    assert raised.value.refusal is Refusal.UNTRUSTED_CERTIFICATE
    assert message.startswith(f"TLS certificate not trusted: the certificate of Kafka at {servers} "), message
    assert "certificate verify failed" in message and "kafka.ssl.ca.location" in message
    assert "Timed out" not in message


def test_a_principal_that_may_describe_but_not_read_its_topic_is_told_to_grant_read(secured, topic_name):
    """The driver plans the batch (DESCRIBE suffices); the executors' fetch is refused. It was
    asked again until kafkaConsumer.pollTimeoutMs and failed as "no progress ... check
    kafka.bootstrap.servers". A task's read, run here as an executor runs it."""
    make_topic(secured.cluster, topic_name, 1, per_partition=10)
    grant_ingestion_acls(secured.cluster, DESCRIBER, topic_name, operations=(AclOperation.DESCRIBE,))
    options = {**scram_options(secured.reader_password, DESCRIBER), "kafkaConsumer.pollTimeoutMs": "60000"}
    settings = parse_options({"kafka.bootstrap.servers": secured.bootstrap_servers, "subscribe": topic_name,
                              **options}, read="stream")
    assert KafkaAdmin.from_settings(settings).latest_offsets([Bucket(topic_name, 0)]) == {Bucket(topic_name, 0): 10}

    task = KafkaSplit((KafkaRange(topic_name, 0, 0, 10),), "")
    with pytest.raises(AccessRefusedError) as raised:
        list(read_split(task, settings.reader_config, pool=ConsumerPool(capacity=0)))
    message = str(raised.value)
    assert message.startswith(f"authorization refused for topic {topic_name!r}: Kafka at {secured.bootstrap_servers} "
                              f"does not allow principal User:{DESCRIBER} READ on it ("), message
    assert (f"Topic authorization failed). Grant principal User:{DESCRIBER} DESCRIBE and READ on topic "
            f"{topic_name!r}") in message
