# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""The users' traffic: the demo user's requests, and how each one ended.

One thread sends, at a seeded pace and with a bound on the requests under
way: boots (one server, or a batch that needs most of the fleet), deletes,
reboots, stops, starts and rebuilds, through nova's API with the demo
user's keystoneauth session (what the ``openstack`` client does). Its
choices are drawn from a generator seeded by the run's seed; which servers
it may pick depends on how earlier requests ended, so only the draws repeat
from run to run, not the traffic.

Another thread follows every request in nova's databases until it ends:

* a boot: each server ACTIVE, or ERROR with a fault (the cell's, or cell0's
  when no host was found);
* an action: the task state cleared, then the request's instance action:
  each event a success and the server in the state asked for, or an event
  in error with its details (or the server's fault);
* a delete: the server gone.

A request still under way past its bound (counted from its sending, and at
least :data:`AFTER_FAULT` after the last fault) is stuck; an error that
names no cause and a server that ends in another state than asked without
any error are violations too. A server that ended in ERROR is watched on
until the workload acts on it again or deletes it: nova must not revive it
(ACTIVE or SHUTOFF with the fault that told the user to boot again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
import dataclasses
import math
import random
import threading
import time
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc

from nova_ironic_multi.tests.soak import observe

#: Seconds a request may take, by kind, from its sending.
BOUNDS = {'boot': 300.0, 'boot-batch': 360.0, 'delete': 240.0,
          'drain-delete': 240.0, 'reboot': 240.0, 'stop': 240.0,
          'start': 240.0, 'rebuild': 300.0}
#: ...and at least this long after the last fault was lifted.
AFTER_FAULT = 180.0
WEIGHTS = {'boot': 22, 'boot-batch': 5, 'delete': 18, 'reboot': 14,
           'stop': 10, 'start': 12, 'rebuild': 10}
#: nova writes an error's fault, and an event's result, just after the
#: state: a cause is looked for this long before it is missing.
CAUSE_DELAY = 10.0
#: At most this many requests under way.
MAX_PENDING = 5
#: A batch asks for at least this share of the fleet...
BATCH_SHARE = 0.6
#: ...and waits at most this long for that much room.
BATCH_WAIT = 60.0
NAME_PREFIX = 'soak-'
STATUS = {'active': 'ACTIVE', 'stopped': 'SHUTOFF', 'error': 'ERROR',
          'building': 'BUILD', 'deleted': 'DELETED'}


@dataclasses.dataclass
class Request:
    n: int
    kind: str
    step: str
    sent: float
    #: What the request asks for: ACTIVE, SHUTOFF, DELETED, or '' for a
    #: rebuild (the state the server had).
    expect: str
    servers: list[str] = dataclasses.field(default_factory=list)
    size: int = 1
    http: int | None = None
    request_id: str | None = None
    reservation: str | None = None
    outcome: str | None = None
    detail: str = ''
    done: float | None = None
    #: server -> 'ok' / 'error: ...' once it ended
    results: dict[str, str] = dataclasses.field(default_factory=dict)
    #: server -> when it was first seen ended without a cause yet (nova
    #: writes the fault or the event's result just after the state)
    uncaused: dict[str, float] = dataclasses.field(default_factory=dict)

    def label(self) -> str:
        return '%s #%d (%s)' % (self.kind, self.n, ','.join(self.servers) or
                                self.reservation or '?')


@dataclasses.dataclass(frozen=True)
class Server:
    uuid: str
    cell: str          # 'cell1', 'cell0' or 'build'
    vm_state: str | None
    task_state: str | None
    host: str | None
    node: str | None
    deleted: bool

    @property
    def status(self) -> str:
        if self.cell == 'build':
            return 'BUILD'
        if self.deleted:
            return 'DELETED'
        return STATUS.get(self.vm_state or '', (self.vm_state or '?').upper())


def outside(servers: Iterable[Server | None]) -> str:
    """'nova-conductor' if no compute can have had any of these servers.

    A server nova's API holds only as a build request never reached a
    cell: nova-conductor creates the instance in its cell before it asks a
    compute to build it (``schedule_and_build_instances``), so a build
    lost there is nova-conductor's, not the driver's. '' otherwise.
    """
    servers = list(servers)
    if servers and all(s is not None and s.cell == 'build'
                       for s in servers):
        return 'nova-conductor'
    return ''


class Workload:
    """See the module docstring."""

    def __init__(self, seed: int, pace: tuple[float, float], fleet: int,
                 compute: ks_adapter.Adapter, project_id: str,
                 dbs: observe.Databases, image: str, flavor: str,
                 step: Callable[[], str], last_fault: Callable[[], float],
                 violation: Callable[..., None],
                 unsafe: Callable[[], set[str]] = set) -> None:
        self.rng = random.Random('nim-soak-traffic:%d' % seed)
        self.pace = pace
        self.fleet = fleet
        self.compute = compute
        self.project_id = project_id
        self.dbs = dbs
        self.image = image
        self.flavor = flavor
        self.step = step
        self.last_fault = last_fault
        self.violation = violation
        self.unsafe = unsafe
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.busy: set[str] = set()
        self.want_batch = 0
        self.batch_until = 0.0
        self.names = 0
        self._sending = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.monitor_errors = 0
        #: Servers whose request ended in ERROR (in the cell), until the
        #: workload acts on them again: uuid -> the request's label.
        self.errored: dict[str, str] = {}

    # Threads ---------------------------------------------------------------

    def start(self) -> None:
        self._sending.set()
        for name, target in (('traffic', self._send_loop),
                             ('requests', self._monitor_loop)):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop_sending(self) -> None:
        self._sending.clear()

    def stop(self) -> None:
        self._sending.clear()
        self._stop.set()
        for t in self._threads:
            t.join(90)

    def pending(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.outcome is None]

    def _send_loop(self) -> None:
        while not self._stop.is_set():
            if self._stop.wait(self.rng.uniform(*self.pace)):
                return
            if not self._sending.is_set() or len(self.pending()) >= \
                    MAX_PENDING:
                continue
            try:
                self.act()
            except Exception as e:   # the traffic must go on
                print('soak: traffic thread: %s: %s' % (type(e).__name__, e),
                      flush=True)

    def _monitor_loop(self) -> None:
        while not self._stop.wait(2.0):
            try:
                self.follow()
            except Exception:
                # A database fault ends this query too: try again.
                self.monitor_errors += 1

    # Choosing and sending ----------------------------------------------------

    def servers(self) -> list[Server]:
        """The demo project's servers, from nova's databases."""
        out = []
        for cell, key in (('cell1', 'nova'), ('cell0', 'nova_cell0')):
            for r in self.dbs.rows(
                    key, 'SELECT uuid, vm_state, task_state, host, node '
                    'FROM instances WHERE project_id = %s AND deleted = 0 '
                    'AND display_name LIKE %s',
                    (self.project_id, NAME_PREFIX + '%')):
                out.append(Server(r[0], cell, r[1], r[2], r[3], r[4], False))
        known = {s.uuid for s in out}
        for (uuid,) in self.dbs.rows(
                'nova_api', 'SELECT instance_uuid FROM build_requests '
                'WHERE project_id = %s', (self.project_id,)):
            if uuid not in known:
                out.append(Server(uuid, 'build', None, None, None, None,
                                  False))
        return out

    def capacity(self) -> int:
        """Nodes a boot can get now: free in placement, on a live host.

        Not what a user sees, but what makes a batch that needs most of the
        fleet worth asking for (a node just torn down is reserved until
        Ironic cleaned it, a dead host's nodes are not scheduled).
        """
        free = {r[0] for r in self.dbs.rows(
            'placement', 'SELECT rp.uuid FROM resource_providers rp JOIN '
            'inventories i ON i.resource_provider_id = rp.id JOIN '
            'resource_classes rc ON rc.id = i.resource_class_id WHERE '
            "rc.name = 'CUSTOM_BAREMETAL' AND i.total - i.reserved > "
            'COALESCE((SELECT sum(a.used) FROM allocations a WHERE '
            'a.resource_provider_id = rp.id AND a.resource_class_id = '
            'i.resource_class_id), 0)')}
        live = {r[0] for r in self.dbs.rows(
            'nova', 'SELECT cn.uuid FROM compute_nodes cn JOIN services s '
            "ON s.host = cn.host AND s.\"binary\" = 'nova-compute' AND "
            's.deleted = 0 WHERE cn.deleted = 0 AND NOT s.disabled AND NOT '
            "s.forced_down AND timezone('utc', now()) - coalesce("
            "s.last_seen_up, s.created_at) < interval '10 seconds'")}
        return len(free & live)

    def act(self) -> None:
        servers = self.servers()
        unsafe = self.unsafe()
        with self.lock:
            free = [s for s in servers if s.uuid not in self.busy]
        room = self.capacity()
        kind = self.rng.choices(list(WEIGHTS),
                                weights=list(WEIGHTS.values()))[0]
        if kind == 'boot-batch' and not self.want_batch:
            self.want_batch = self.rng.randint(
                math.ceil(self.fleet * BATCH_SHARE), self.fleet)
            self.batch_until = time.monotonic() + BATCH_WAIT
        if self.want_batch:
            if room >= self.want_batch:
                self._boot(self.want_batch)
                self.want_batch = 0
                return
            if time.monotonic() > self.batch_until:
                # The fleet never had that much room (hosts down): ask
                # for what it has, if that is still most of it.
                self.want_batch = 0
                if room >= math.ceil(self.fleet * BATCH_SHARE):
                    self._boot(room)
                    return
                kind = 'boot' if room else 'delete'
            else:
                # Make room first, as a user who needs that many would.
                kind = 'delete' if len(servers) > self.fleet - \
                    self.want_batch else 'reboot'
        if kind == 'boot-batch':
            kind = 'boot'
        if kind == 'boot':
            if room >= 1:
                self._boot(1)
                return
            kind = 'delete'
        quiet = [s for s in free if s.task_state is None and
                 s.cell == 'cell1' and s.host not in unsafe]
        candidates = {
            'delete': [s for s in free if s.task_state is None or
                       s.cell != 'cell1'],
            'reboot': [s for s in quiet if s.vm_state == 'active'],
            'stop': [s for s in quiet if s.vm_state == 'active'],
            'start': [s for s in quiet if s.vm_state == 'stopped'],
            'rebuild': [s for s in quiet
                        if s.vm_state in ('active', 'stopped')],
        }
        if kind == 'delete':
            errors = [s for s in candidates['delete']
                      if s.vm_state == 'error']
            if errors and self.rng.random() < 0.7:
                candidates['delete'] = errors
        pool = candidates.get(kind) or []
        if not pool:
            if room >= 1:
                self._boot(1)
            elif candidates['delete']:
                self._action('delete',
                             self.rng.choice(candidates['delete']))
            return
        self._action(kind, self.rng.choice(sorted(pool,
                                                  key=lambda s: s.uuid)))

    def _new(self, kind: str, expect: str, servers: Iterable[str] = (),
             size: int = 1) -> Request:
        with self.lock:
            req = Request(len(self.requests) + 1, kind, self.step(),
                          time.monotonic(), expect, list(servers), size)
            self.requests.append(req)
            self.busy.update(req.servers)
            for uuid in req.servers:
                self.errored.pop(uuid, None)
            return req

    def _call(self, req: Request, method: str, path: str,
              body: Any = None) -> Any:
        try:
            resp = self.compute.request(path, method, json=body,
                                        raise_exc=False, timeout=60)
        except ks_exc.ClientException as e:
            self._close(req, 'rejected', '%s: %s' % (type(e).__name__, e))
            return None
        req.http = resp.status_code
        req.request_id = resp.headers.get('x-openstack-request-id')
        if resp.status_code >= 400:
            self._close(req, 'rejected', 'HTTP %d: %s' % (
                resp.status_code, resp.text[:300]))
            return None
        return resp

    def _boot(self, size: int) -> None:
        self.names += 1
        kind = 'boot' if size == 1 else 'boot-batch'
        req = self._new(kind, 'ACTIVE', size=size)
        body = {'server': {
            'name': '%s%d' % (NAME_PREFIX, self.names),
            'imageRef': self.image, 'flavorRef': self.flavor,
            'networks': 'none', 'min_count': size, 'max_count': size,
            'return_reservation_id': size > 1}}
        resp = self._call(req, 'POST', '/servers', body)
        if resp is None:
            return
        data = resp.json()
        if size == 1:
            req.servers = [data['server']['id']]
        else:
            req.reservation = data['reservation_id']
            boot_id = req.request_id
            listed = self._call(req, 'GET', '/servers?reservation_id=%s'
                                % req.reservation)
            req.request_id = boot_id
            if listed is None:
                return
            req.servers = [s['id'] for s in listed.json()['servers']]
            if len(req.servers) != size:
                self._close(req, 'rejected', 'asked for %d servers, nova '
                            'lists %d under %s' % (size, len(req.servers),
                                                   req.reservation))
                return
        with self.lock:
            self.busy.update(req.servers)

    def _action(self, kind: str, server: Server) -> Request:
        paths = {
            'reboot': ('POST', '/servers/%s/action', {'reboot': {
                'type': self.rng.choice(['SOFT', 'HARD'])}}, 'ACTIVE'),
            'stop': ('POST', '/servers/%s/action', {'os-stop': None},
                     'SHUTOFF'),
            'start': ('POST', '/servers/%s/action', {'os-start': None},
                      'ACTIVE'),
            'rebuild': ('POST', '/servers/%s/action',
                        {'rebuild': {'imageRef': self.image}}, ''),
            'delete': ('DELETE', '/servers/%s', None, 'DELETED'),
            'drain-delete': ('DELETE', '/servers/%s', None, 'DELETED'),
        }
        method, path, body, expect = paths[kind]
        if kind == 'rebuild':
            expect = server.status
        req = self._new(kind, expect, [server.uuid])
        self._call(req, method, path % server.uuid, body)
        return req

    def delete(self, uuids: Iterable[str], kind: str = 'drain-delete'
               ) -> list[Request]:
        """Delete these servers now (an operator's drain), as the user."""
        return [self._action(kind, Server(uuid, 'cell1', None, None, None,
                                          None, False))
                for uuid in uuids]

    def unstarted(self, host: str) -> list[Request]:
        """Requests for ``host``'s servers it has not begun to handle.

        Only a delete may wait for a compute that restarts: nova-compute
        resets every other task state it finds at start (``_init_instance``)
        and then handles the queued request anyway, which fails it, leaves
        the task state set, and for a rebuild drops the server's
        allocation (nova's behaviour with any driver).
        """
        pending = [r for r in self.pending() if r.servers and
                   'delete' not in r.kind]
        if not pending:
            return []
        states = self._states(sorted({u for r in pending
                                      for u in r.servers}))
        events = self._events([r.request_id for r in pending
                               if r.request_id])
        return [r for r in pending
                if any((states.get(u) or Server(u, '', None, None, None,
                                                None, False)).host == host
                       for u in r.servers) and
                not any(e[0].startswith('compute')
                        for u in r.servers
                        for e in events.get((r.request_id or '', u), []))]

    # Following ---------------------------------------------------------------

    def _close(self, req: Request, outcome: str, detail: str = '') -> None:
        with self.lock:
            if req.outcome is not None:
                return
            req.outcome = outcome
            req.detail = detail
            req.done = time.monotonic()
            self.busy.difference_update(req.servers)

    def follow(self) -> None:
        self._watch_errored()
        # (A request is followed once nova's API answered it.)
        pending = [r for r in self.pending()
                   if r.servers and r.http is not None]
        if not pending:
            return
        uuids = sorted({u for r in pending for u in r.servers})
        states = self._states(uuids)
        faults = self._faults(uuids)
        events = self._events([r.request_id for r in pending
                               if r.request_id])
        now = time.monotonic()
        for req in pending:
            self._judge(req, states, faults, events, now)

    def _watch_errored(self) -> None:
        """An ERROR a request ended in sticks until the workload acts."""
        with self.lock:
            watched = dict(self.errored)
        if not watched:
            return
        states = self._states(sorted(watched))
        for uuid, label in watched.items():
            state = states.get(uuid)
            if state is None or state.deleted:
                with self.lock:
                    self.errored.pop(uuid, None)
                continue
            if state.vm_state in ('active', 'stopped'):
                with self.lock:
                    if self.errored.pop(uuid, None) is None:
                        continue    # acted on meanwhile
                self.violation(
                    'an ERROR sticks', label,
                    'server %s ended in ERROR, then nova made it %s on %s '
                    '(node %s) with nobody asking' % (
                        uuid, STATUS.get(state.vm_state, state.vm_state),
                        state.host, state.node), self.step())

    def _states(self, uuids: list[str]) -> dict[str, Server]:
        out: dict[str, Server] = {}
        for cell, key in (('cell0', 'nova_cell0'), ('cell1', 'nova')):
            for r in self.dbs.rows(
                    key, 'SELECT uuid, vm_state, task_state, host, node, '
                    'deleted FROM instances WHERE uuid = ANY(%s)', (uuids,)):
                out[r[0]] = Server(r[0], cell, r[1], r[2], r[3], r[4],
                                   bool(r[5]))
        for (uuid,) in self.dbs.rows(
                'nova_api', 'SELECT instance_uuid FROM build_requests WHERE '
                'instance_uuid = ANY(%s)', (uuids,)):
            if uuid not in out:
                out[uuid] = Server(uuid, 'build', None, None, None, None,
                                   False)
        return out

    def _faults(self, uuids: list[str]) -> dict[str, str]:
        out = {}
        for key in ('nova_cell0', 'nova'):
            for uuid, message, details in self.dbs.rows(
                    key, 'SELECT instance_uuid, message, details FROM '
                    'instance_faults WHERE instance_uuid = ANY(%s) ORDER BY '
                    'id', (uuids,)):
                out[uuid] = (message or '').strip() or (
                    details or '').strip()[:300]
        return out

    def _events(self, request_ids: list[str]
                ) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
        """(request id, server) -> [(event, result, details, traceback)]"""
        out: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        if not request_ids:
            return out
        for rid, uuid, event, result, details, tb in self.dbs.rows(
                'nova', 'SELECT a.request_id, a.instance_uuid, e.event, '
                'e.result, e.details, e.traceback FROM instance_actions a '
                'LEFT JOIN instance_actions_events e ON e.action_id = a.id '
                'WHERE a.request_id = ANY(%s)', (request_ids,)):
            out.setdefault((rid, uuid), [])
            if event is not None:
                out[(rid, uuid)].append((event, result, details, tb))
        return out

    def _judge(self, req: Request, states: dict[str, Server],
               faults: dict[str, str],
               events: dict[tuple[str, str], list[tuple[Any, ...]]],
               now: float) -> None:
        for uuid in req.servers:
            if uuid in req.results:
                continue
            state = states.get(uuid)
            result = self._result(req, uuid, state, faults, events, now)
            if result is not None:
                req.results[uuid] = result
                if (result.startswith('error') and state is not None and
                        state.cell == 'cell1'):
                    with self.lock:
                        self.errored[uuid] = req.label()
        if len(req.results) == len(req.servers):
            outcomes = {r.split(':', 1)[0] for r in req.results.values()}
            outcome = outcomes.pop() if len(outcomes) == 1 else 'partial'
            details = sorted({r.split(': ', 1)[1] for r in
                              req.results.values() if ': ' in r})
            self._close(req, outcome, '; '.join(details)[:500])
            return
        deadline = max(req.sent + BOUNDS[req.kind],
                       self.last_fault() + AFTER_FAULT)
        if now > deadline:
            stuck = {u: states.get(u) for u in req.servers
                     if u not in req.results}
            self.violation(
                'no request stuck', req.label(),
                '%.0fs after it was sent (HTTP %s, request %s): %s' % (
                    now - req.sent, req.http, req.request_id,
                    ', '.join('%s %s/%s on %s node %s' % (
                        u, s.status, s.task_state, s.host, s.node)
                        if s is not None else '%s: not found' % u
                        for u, s in stuck.items())), req.step,
                outside=outside(stuck.values()))
            self._close(req, 'stuck', 'still under way past its bound')

    def _result(self, req: Request, uuid: str, state: Server | None,
                faults: dict[str, str],
                events: dict[tuple[str, str], list[tuple[Any, ...]]],
                now: float) -> str | None:
        """'ok', 'error: cause', 'failed: cause', 'gone', or None (not yet).
        """
        if req.expect == 'DELETED':
            if state is None or state.deleted:
                return 'ok'
            if state.cell == 'cell1' and state.vm_state == 'error' and \
                    state.task_state is None:
                return self._caused(req, uuid, 'error', faults.get(uuid))
            return None
        if state is None:
            # Not yet visible, or deleted (by a drain) before it ended.
            return 'gone' if now - req.sent > 30 else None
        if state.deleted:
            return 'gone'
        if state.cell == 'cell0':
            return self._caused(req, uuid, 'error', faults.get(uuid))
        if state.cell == 'build' or state.task_state is not None:
            return None
        if state.vm_state == 'building':
            return None
        if state.vm_state == 'error':
            return self._caused(req, uuid, 'error', faults.get(uuid))
        done = events.get((req.request_id or '', uuid), [])
        if any(e[1] is None for e in done) and not self._late(req, uuid,
                                                             now):
            return None         # an event not finished yet
        failed = [e for e in done if e[1] == 'Error']
        if failed:
            event, _, details, tb = failed[-1]
            cause = (details or '').strip() or (
                (tb or '').strip().splitlines() or [''])[-1]
            return self._caused(req, uuid, 'failed', cause and '%s: %s' % (
                event, cause) or faults.get(uuid))
        if state.status == (req.expect or state.status):
            return 'ok'
        self.violation(
            'requests end as asked', req.label(),
            'server %s ended %s, not %s, and no event of request %s failed'
            % (uuid, state.status, req.expect or 'as it was',
               req.request_id), req.step)
        return 'other: ended %s' % state.status

    @staticmethod
    def _late(req: Request, uuid: str, now: float) -> bool:
        """Whether the cause nova writes after the state is overdue."""
        return now - req.uncaused.setdefault(uuid, now) > CAUSE_DELAY

    def _caused(self, req: Request, uuid: str, outcome: str,
                cause: str | None) -> str | None:
        if not cause and not self._late(req, uuid, time.monotonic()):
            return None
        if not cause:
            self.violation(
                'errors name their cause', req.label(),
                'server %s ended %s with no fault message nor event detail'
                % (uuid, outcome), req.step)
            return '%s: (no cause given)' % outcome
        return '%s: %s' % (outcome, ' '.join(cause.split())[:200])
