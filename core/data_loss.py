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

from backlog_source.core.errors import BacklogSourceError, DataLossError

log = logging.getLogger(__name__)


def report_data_loss(fail_on_data_loss: bool, lost: str, *, instead: str, first_try: str | None = None,
                     error: type[BacklogSourceError] = DataLossError) -> None:
    """Fail or warn about the records ``lost`` describes (which records, where, why).

    ``instead``: what the query does without them, as the end of "Set failOnDataLoss=false
    to ..." (``"skip them"``); ``first_try``: a remedy to suggest before that one, if any
    (``"take a newer snapshot"``); ``error``: the class raised, :class:`DataLossError` unless
    the records never existed (a batch read's range past the log end: a
    :class:`~backlog_source.core.errors.ConfigError`).

    With ``fail_on_data_loss``, raise ``error`` "``lost``. Set failOnDataLoss=false to
    ``instead``" (or "``lost``. ``First try``, or set ..."). Else log a warning "``lost``;
    failOnDataLoss=false, so the query will ``instead``" and return.
    """
    if fail_on_data_loss:
        remedy = f"set failOnDataLoss=false to {instead}"
        if first_try:
            remedy = f"{first_try}, or {remedy}"
        raise error(f"{lost}. {remedy[0].upper()}{remedy[1:]}")
    log.warning("%s; failOnDataLoss=false, so the query will %s", lost, instead)
