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
"""Each kind of fault, as an operator (or bad luck) would bring it.

A fault is a few phases. ``soak.disrupt()`` marks the start of a state the
deployment cannot be expected to serve (Keystone gone, Ironic answering
503s): the graces stop counting. ``soak.transition(label)`` marks a state
it must handle from now on (a host dead, fenced, reconfigured, or the
fault lifted): the invariants are checked from there and the time to
converge is measured under ``kind: label``.

RabbitMQ. The machine's broker is shared with other users, so it is never
restarted. The deployment's services reach it through a TCP proxy of the
soak's (:mod:`.tcp_proxy`), which plays the restart: every connection
closed, new ones refused (nothing listens) for the time the fault is held,
then accepted again. The queues and their messages stay, as a broker with
durable queues keeps them across a restart. (Closing the vhost's
connections with ``rabbitmqctl`` and refusing new ones with a vhost limit
would be scoped too, but oslo.messaging takes the refusal, ``NOT_ALLOWED``,
as final and gives up a call a real restart would only delay.)
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

from nova_ironic_multi.tests.fixtures import processes
from nova_ironic_multi.tests.soak import schedule

if TYPE_CHECKING:   # pragma: no cover
    from nova_ironic_multi.tests.soak import runner

STOP_TIMEOUT = 60
#: The nova and placement databases whose connections are terminated.
NOVA_DATABASES = ('nova_api', 'nova', 'nova_cell0', 'placement')


def run(soak: runner.Soak, step: schedule.Step) -> None:
    KINDS[step.kind](soak, step)


# nova-compute ---------------------------------------------------------------

def _kill(soak: runner.Soak, host: str, signo: int) -> int | None:
    compute = soak.dep.computes[host]
    soak.quiesce(host)
    soak.intended_down.add(compute.process.name)
    if signo == signal.SIGTERM and compute.process.running():
        # A graceful stop is judged once the start is over (see
        # Deployment.wait_serving); a compute that never gets there is a
        # violation of its own, and is stopped all the same.
        try:
            soak.dep.wait_serving(compute)
        except (processes.Timeout, processes.ProcessDied) as e:
            soak.violation('a compute starts', host, str(e)[:500])
    compute.process.signal(signo)
    status = compute.process.wait(STOP_TIMEOUT)
    if status is None:
        compute.process.kill_group()
        soak.violation('SIGTERM stops a compute', host,
                       'still running %ds after SIGTERM; killed: %s'
                       % (STOP_TIMEOUT, compute.process.tail(20)))
    return status


def _start(soak: runner.Soak, host: str) -> None:
    compute = soak.dep.computes[host]
    since = time.time()
    compute.start()
    soak.intended_down.discard(compute.process.name)
    soak.release(host, since)


def kill_compute(soak: runner.Soak, step: schedule.Step) -> None:
    soak.disrupt()
    _kill(soak, step.target, signal.SIGKILL)
    soak.transition('dead')
    soak.sleep(step.hold)
    _start(soak, step.target)
    soak.transition('back')


def sigterm_compute(soak: runner.Soak, step: schedule.Step) -> None:
    soak.disrupt()
    status = _kill(soak, step.target, signal.SIGTERM)
    if status not in (0, None):
        soak.violation('SIGTERM stops a compute', step.target,
                       'exited with %s after SIGTERM: %s' % (
                           status, soak.dep.computes[step.target]
                           .process.tail(20)))
    soak.transition('stopped')
    soak.sleep(step.hold)
    _start(soak, step.target)
    soak.transition('back')


def fence(soak: runner.Soak, step: schedule.Step) -> None:
    host = step.target
    soak.disrupt()
    _kill(soak, host, signal.SIGKILL)
    soak.cli('compute', 'service', 'set', '--down', host, 'nova-compute')
    # From the fence: its instances move to the peers within a period.
    soak.transition('fenced')
    soak.sleep(step.hold)
    soak.disrupt()
    _start(soak, host)
    soak.wait_service_up(host)
    soak.cli('compute', 'service', 'set', '--up', host, 'nova-compute')
    soak.transition('unfenced')


def scale_in(soak: runner.Soak, step: schedule.Step) -> None:
    host = step.target
    compute = soak.dep.computes[host]
    # Set just before the removal, as the operations guide says.
    mark = compute.process.log_size()
    compute.reconfigure(drain_on_stop='true')
    compute.sighup()
    soak.wait_log(host, r'Option ironic_multi\.drain_on_stop changed', mark,
                  'drain_on_stop to be reloaded',
                  invariant='a reload applies')
    soak.disrupt()
    status = _kill(soak, host, signal.SIGTERM)
    if status not in (0, None):
        soak.violation('SIGTERM stops a compute', host,
                       'exited with %s after SIGTERM with drain_on_stop: %s'
                       % (status, compute.process.tail(20)))
    # Its servers are its peer's now; its service disabled by the drain.
    soak.transition('drained')
    soak.sleep(step.hold)
    soak.disrupt()
    compute.partition.pop('drain_on_stop', None)
    compute.write_conf()
    _start(soak, host)
    soak.transition('back')


# SIGHUP --------------------------------------------------------------------

def _reload(soak: runner.Soak, host: str, **options: str) -> None:
    compute = soak.dep.computes[host]
    compute.reconfigure(**options)
    compute.sighup()


def _apply(soak: runner.Soak, hosts: tuple[str, ...], **options: str) -> None:
    """A valid change on these hosts, one after the other."""
    for host in hosts:
        _reload(soak, host, **options)
        soak.set_config(host, **options)


def sighup_peers(soak: runner.Soak, step: schedule.Step) -> None:
    # host2 first stops claiming its share, then host1 takes it; back in
    # the other order: nobody claims a node twice on the way.
    _apply(soak, ('host2', 'host1'), peer_list='host1')
    soak.transition('host2 left the list')
    soak.sleep(step.hold)
    _apply(soak, ('host1', 'host2'), peer_list='host1,host2')
    soak.transition('host2 back in the list')


def _drain(soak: runner.Soak, host: str) -> None:
    """Disable ``host`` and delete its servers (their users were told)."""
    soak.cli('compute', 'service', 'set', '--disable', host, 'nova-compute')
    soak.drain(host)


def sighup_group(soak: runner.Soak, step: schedule.Step) -> None:
    soak.disrupt()
    _drain(soak, 'host3')
    _apply(soak, ('host1', 'host2'), peer_list='host1,host2,host3')
    _apply(soak, ('host3',), partition_key='g1',
           peer_list='host1,host2,host3')
    soak.cli('compute', 'service', 'set', '--enable', 'host3',
             'nova-compute')
    soak.transition('host3 in g1')
    soak.sleep(step.hold)
    soak.disrupt()
    _drain(soak, 'host3')
    _apply(soak, ('host3',), partition_key='g2', peer_list='host3')
    _apply(soak, ('host1', 'host2'), peer_list='host1,host2')
    soak.cli('compute', 'service', 'set', '--enable', 'host3',
             'nova-compute')
    soak.transition('host3 back in g2')


def sighup_divide(soak: runner.Soak, step: schedule.Step) -> None:
    _apply(soak, schedule.COMPUTES, divide='shards')
    soak.transition('shards')
    soak.sleep(step.hold)
    _apply(soak, schedule.COMPUTES, divide='nodes')
    soak.transition('nodes')


def sighup_invalid(soak: runner.Soak, step: schedule.Step) -> None:
    host = step.target
    option, value = [p.strip() for p in step.detail.split('=', 1)]
    compute = soak.dep.computes[host]
    good = compute.partition.get(option)
    mark = compute.process.log_size()
    _reload(soak, host, **{option: value})
    # Nothing changes: the checks go on with the partition in force.
    soak.transition('refused')
    soak.wait_log(host, r'Reload: rejected|Reload not applied', mark,
                  'the invalid %s = %s to be refused' % (option, value))
    soak.sleep(step.hold)
    if good is None:
        compute.partition.pop(option, None)
        compute.write_conf()
        compute.sighup()
    else:
        _reload(soak, host, **{option: good})
    soak.transition('good file back')


# Ironic ------------------------------------------------------------------

def ironic_conductor(soak: runner.Soak, step: schedule.Step) -> None:
    proc = soak.dep.ironic.processes['ironic-conductor-' + step.target]
    soak.disrupt()
    soak.intended_down.add(proc.name)
    soak.groups_down.add(step.target)
    proc.kill_group()
    soak.sleep(step.hold)
    proc.start()
    soak.intended_down.discard(proc.name)
    soak.groups_down.discard(step.target)
    processes.wait_for('ironic-conductor of %s online' % step.target,
                       lambda: step.target in soak.online_groups(),
                       120, interval=1, alive=[proc])
    soak.transition('back')


def ironic_api(soak: runner.Soak, step: schedule.Step) -> None:
    proc = soak.dep.ironic.processes['ironic-api']
    soak.disrupt()
    soak.intended_down.add(proc.name)
    proc.stop(timeout=30)
    soak.sleep(step.hold)
    proc.start()
    soak.intended_down.discard(proc.name)
    soak.dep.ironic.wait_ready(120)
    soak.transition('back')


def ironic_503(soak: runner.Soak, step: schedule.Step) -> None:
    soak.disrupt()
    for method in ('GET', 'POST', 'PUT', 'PATCH', 'DELETE'):
        soak.proxy.fail(method, '.', 10 ** 9)
    soak.sleep(step.hold)
    soak.proxy.clear()
    soak.transition('lifted')


# The shared services -------------------------------------------------------

def keystone(soak: runner.Soak, step: schedule.Step) -> None:
    ks = soak.dep.keystone
    soak.disrupt()
    soak.intended_down.add(ks.process.name)
    ks.stop()
    soak.sleep(step.hold)
    ks.start()
    ks.wait_ready()
    soak.intended_down.discard(ks.process.name)
    soak.transition('back')


def rabbitmq(soak: runner.Soak, step: schedule.Step) -> None:
    soak.disrupt()
    soak.amqp.cut()
    soak.sleep(step.hold)
    soak.amqp.restore()
    soak.transition('back')


def database(soak: runner.Soak, step: schedule.Step) -> None:
    times = int(step.detail.split()[0])
    soak.disrupt()
    for _ in range(times):
        soak.terminated += soak.dbs.terminate(NOVA_DATABASES)
        soak.sleep(step.hold / times)
    soak.transition('back')


KINDS = {
    'kill-compute': kill_compute,
    'sigterm-compute': sigterm_compute,
    'fence': fence,
    'scale-in': scale_in,
    'sighup-peers': sighup_peers,
    'sighup-group': sighup_group,
    'sighup-divide': sighup_divide,
    'sighup-invalid': sighup_invalid,
    'ironic-conductor': ironic_conductor,
    'ironic-api': ironic_api,
    'rabbitmq': rabbitmq,
    'database': database,
    'keystone': keystone,
    'ironic-503': ironic_503,
}
assert set(KINDS) == set(schedule.KINDS)
