"""One listener per SparkSession, kept registered; queries attach to it and detach from it.

Which process: the user's driver program. Threads:

* :meth:`SessionListener.attach` runs on the thread that starts a backlog-aware query (the
  user's); the first time, it has the session's listener registered with
  ``spark.streams.addListener`` on a short-lived daemon thread (``backlog-listener-register``,
  waited for with a deadline), and never again while Spark keeps it.
* The listener's callbacks run on Spark's listener thread (classic PySpark: a py4j callback
  thread fed by the JVM's listener bus) or on the Connect client's event thread (and, for
  ``onQueryStarted``, on whichever thread called ``writer.start()``). They hand each message
  to the receivers attached for its query, and return at once.
* :meth:`Attachment.follow` and :meth:`Attachment.detach` run on any thread: they change a
  table in this process and never call Spark.

Why the listener is never removed: PySpark Connect's ``StreamingQueryListenerBus.remove``
(pyspark/sql/connect/streaming/query.py), when it removes the last listener, sends the
server a command and then joins its event thread *while holding the bus lock*; that thread
takes the same lock in ``post_to_all`` to deliver each event. An event already on its way
(a stopped query's ``QueryTerminatedEvent``, a low-latency query's progress and idle events,
any other query's) blocks the event thread on the lock, and ``remove`` waits for that thread
forever: a stop that never returns (seen on Spark Connect). No caller can know that no event is on
its way, so the only safe ``removeListener`` is none: a query that ends only detaches here,
and the listener stays registered for the session's life (events of queries nobody follows
are dropped before they are parsed). Classic PySpark's ``removeListener`` has no such lock,
but the same code path serves both.

Why it is registered from a daemon thread: Connect's bus starts its event thread inside
``addListener`` when it had no listener, and a Python thread is a daemon only if the thread
that created it is. The old handle's ``removeListener`` ended that thread; a listener kept
registered keeps it, and a non-daemon one would keep the user's program from exiting unless
it calls ``spark.stop()``. Registered from a daemon thread, it does not.

``backlog_source.install(spark, ...)`` attaches one receiver for every query of the session
(``attach(spark, receiver)`` with no query id) and leaves the queries a handle follows alone;
``start_backlog_aware`` attaches its handle for all queries until its query has started, then
follows that query's id (the id is kept in the checkpoint, so a restart-method switch keeps
it).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from backlog_source.core.errors import ModeSwitchError
from backlog_source.mode_switch.listener import BacklogModeListener, MessageReceiver

log = logging.getLogger(__name__)

#: The attribute of a SparkSession object (classic or Connect) that holds its
#: :class:`SessionListener`. Kept on the session itself, not in a module-level table: a
#: Connect listener holds its session (``addListener`` sets ``listener.spark``), so a table
#: here would keep every session ever used alive.
SESSION_ATTRIBUTE = "_backlog_source_session_listener"

_sessions_lock = threading.Lock()  # guards creating a session's SessionListener; never held calling Spark

#: How long :meth:`SessionListener.attach` waits for ``addListener`` (a Connect client waits
#: for the server to confirm it).
REGISTER_TIMEOUT_S = 60.0


class Attachment:
    """One receiver attached to a session's listener. It gets the messages of the query it
    follows, or of every query while it follows none. After :meth:`detach` returns it gets
    no new message; a message being delivered at that very moment may still arrive (the
    routing lock is not held while a receiver runs)."""

    def __init__(self, owner: "SessionListener", receiver: MessageReceiver) -> None:
        self._owner = owner
        self.receiver = receiver
        self.query_id: str | None = None  # None: every query of the session
        self.attached = True

    def follow(self, query_id: str) -> None:
        """From now on, only the messages of ``query_id``. Any thread; never calls Spark."""
        self._owner._route(self, str(query_id))

    def detach(self) -> None:
        """No more messages. Idempotent; any thread, including Spark's listener thread (it
        never calls Spark, so it cannot wait for a listener bus)."""
        self._owner._drop(self)


class SessionListener:
    """The receivers attached to one SparkSession, and the :class:`BacklogModeListener` that
    feeds them, registered with the session once and never removed by this package.

    Two locks, so that no lock of ours is ever held while Spark's bus lock is wanted by a
    thread that needs ours: ``_routes`` (who follows which query) is taken by the callbacks
    (while the Connect bus lock is held) and by attach/follow/detach, only around dict
    updates, and is never held while calling Spark or a receiver; ``_registering`` is taken
    only by :meth:`attach` around ``addListener``, never by a callback.
    """

    def __init__(self) -> None:
        self._routes = threading.Lock()
        self._everything: list[Attachment] = []  # attachments that follow no query yet
        self._by_query: dict[str, list[Attachment]] = {}
        self._registering = threading.Lock()
        self._listener = _RoutingListener(self)
        self._registered = False
        self._registration: _Registration | None = None  # one in progress (it outlives a timed-out wait)

    @classmethod
    def of(cls, spark: Any) -> "SessionListener":
        """The session's own, made on first use (not registered with Spark until
        :meth:`attach`)."""
        with _sessions_lock:
            found = vars(spark).get(SESSION_ATTRIBUTE)
            if found is None:
                found = cls()
                setattr(spark, SESSION_ATTRIBUTE, found)
            return found

    @property
    def listener(self) -> BacklogModeListener:
        """The ``StreamingQueryListener`` registered with the session."""
        return self._listener

    # -- the thread that starts a query ----------------------------------------------------

    def attach(self, spark: Any, receiver: MessageReceiver) -> Attachment:
        """Attach ``receiver`` for every query of ``spark`` (narrow it with
        :meth:`Attachment.follow`), registering the listener first if Spark does not hold it.
        Raises what ``addListener`` raises, or :class:`ModeSwitchError` when it did not
        finish within ``REGISTER_TIMEOUT_S`` or a Connect client dropped the listener at
        once; nothing is attached then."""
        attachment = Attachment(self, receiver)
        with self._routes:
            self._everything.append(attachment)
        try:
            self._ensure_registered(spark)
        except BaseException:  # cleanup, then re-raised
            attachment.detach()
            raise
        return attachment

    def _ensure_registered(self, spark: Any) -> None:
        # Held around addListener: two queries started at once on one session register one
        # listener. No callback takes this lock, so waiting here for Connect's bus lock
        # (held by a delivery in progress, which needs only ``_routes``) always ends.
        with self._registering:
            if self._registered and not _dropped_by_connect(spark, self._listener):
                return
            if self._registered:
                log.warning("the Spark Connect client dropped the backlog listener (its event stream failed); "
                            "registering it again")
                self._registered = False
            registration = self._registration
            if registration is None:  # else a registration that timed out earlier: wait for that one, not a second
                registration = self._registration = _Registration(spark, self._listener)
            if not registration.done.wait(REGISTER_TIMEOUT_S):
                raise ModeSwitchError(f"registering the backlog listener with the session did not finish within "
                                      f"{REGISTER_TIMEOUT_S:g} s")
            self._registration = None
            if registration.error is not None:
                raise registration.error
            if _dropped_by_connect(spark, self._listener):  # Connect's append warns and drops it when the server refuses
                raise ModeSwitchError("the Spark Connect client did not keep the backlog listener (see its warning); "
                                      "the query would never switch modes")
            self._registered = True

    # -- any thread; never calls Spark ----------------------------------------------------

    def follows(self, query_id: str) -> bool:
        """Whether some receiver wants ``query_id``'s messages."""
        with self._routes:
            return bool(self._everything) or query_id in self._by_query

    def followed_alone(self, query_id: str) -> bool:
        """Whether a receiver follows ``query_id`` by its id (a ``start_backlog_aware``
        handle): a session-wide receiver (``install``) leaves such a query to it."""
        with self._routes:
            return query_id in self._by_query

    def receive(self, message: Any) -> None:
        """Called by the listener on Spark's listener thread (classic) or the Connect client's
        event thread, possibly while the Connect bus lock is held: deliver to the attached
        receivers (which only queue, never block), outside our lock."""
        with self._routes:
            targets = [*self._everything, *self._by_query.get(message.query_id, ())]
        for attachment in targets:
            try:
                attachment.receiver.receive(message)
            except Exception:  # process boundary: Spark's listener thread; one bug each
                log.exception("a backlog listener receiver failed on %s", message)

    def _route(self, attachment: Attachment, query_id: str) -> None:
        with self._routes:
            if not attachment.attached:
                return
            self._unlink(attachment)
            attachment.query_id = query_id
            self._by_query.setdefault(query_id, []).append(attachment)

    def _drop(self, attachment: Attachment) -> None:
        with self._routes:
            if attachment.attached:
                self._unlink(attachment)
                attachment.attached = False

    def _unlink(self, attachment: Attachment) -> None:  # with self._routes held
        if attachment.query_id is None:
            self._everything.remove(attachment)
            return
        followers = self._by_query[attachment.query_id]
        followers.remove(attachment)
        if not followers:
            del self._by_query[attachment.query_id]


class _Registration:
    """``spark.streams.addListener(listener)`` on a daemon thread of its own
    (``backlog-listener-register``), so that the event thread a Connect client starts in it
    is a daemon too (see the module's docstring); ``done`` is set when it returned, with
    ``error`` what it raised."""

    def __init__(self, spark: Any, listener: Any) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        thread = threading.Thread(target=self._run, args=(spark, listener), name="backlog-listener-register",
                                  daemon=True)
        thread.start()

    def _run(self, spark: Any, listener: Any) -> None:
        try:
            spark.streams.addListener(listener)
        except BaseException as exc:  # process boundary: the error goes to the waiting caller
            self.error = exc
        finally:
            self.done.set()


class _RoutingListener(BacklogModeListener):
    """The session's listener: parses only the events of followed queries (every progress
    event of every query of the session reaches it, for the session's life)."""

    def __init__(self, routes: SessionListener) -> None:
        super().__init__(routes)
        self._routes = routes

    def onQueryProgress(self, event) -> None:
        if self._routes.follows(str(event.progress.id)):
            super().onQueryProgress(event)

    def onQueryIdle(self, event) -> None:
        if self._routes.follows(str(event.id)):
            super().onQueryIdle(event)

    def onQueryTerminated(self, event) -> None:
        if self._routes.follows(str(event.id)):
            super().onQueryTerminated(event)


def _dropped_by_connect(spark: Any, listener: Any) -> bool:
    """True when a Spark Connect client's listener bus no longer holds ``listener``: its
    event thread clears the bus when the event stream fails (``_query_event_handler``), and
    a listener registered once would then never hear of a new query. Read from the client's
    private list (a plain read, no lock: a membership test cannot wait); classic sessions,
    whose JVM keeps a listener, have no such list and answer False."""
    held = getattr(getattr(spark.streams, "_sqlb", None), "_listener_bus", None)
    return isinstance(held, list) and listener not in held
