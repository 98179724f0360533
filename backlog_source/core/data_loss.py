"""What the source does when records it should read are gone: Spark's ``reportDataLoss``.

Spark's Kafka source decides this in one private method (``KafkaMicroBatchStream
.reportDataLoss``, and its twin in ``KafkaDataConsumer``): under ``failOnDataLoss=true``
(the default) the query fails; under ``false`` it logs a warning and goes on. Every place
that can lose records (a deleted partition, offsets that moved backwards, a start below the
earliest offset, records deleted by retention while a task read them) calls
:func:`report_data_loss`, so the rule and the wording are written once.

Runs wherever the loss is found: the driver's planner worker or an executor's reader.
Warnings go to the ``backlog_source.core.data_loss`` logger, one name to alert on.
"""

from __future__ import annotations

import logging

from backlog_source.core.errors import DataLossError

log = logging.getLogger(__name__)


def report_data_loss(fail_on_data_loss: bool, lost: str, *, to_continue: str, continuing: str) -> None:
    """Fail or warn about the records ``lost`` describes (which records, where, why).

    ``fail_on_data_loss``: raise :class:`DataLossError` "``lost``. ``to_continue``", where
    ``to_continue`` tells the user how to go on (usually "Set failOnDataLoss=false to ...").
    Otherwise log a warning "``lost``; ``continuing`` (failOnDataLoss=false)", where
    ``continuing`` says what the source does instead, and return.
    """
    if fail_on_data_loss:
        raise DataLossError(f"{lost}. {to_continue}")
    log.warning("%s; %s (failOnDataLoss=false)", lost, continuing)
