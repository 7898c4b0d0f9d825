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
"""The tier's Ironic powers its nodes as real hardware does.

The first long soak (seed 1) saw a boot end SHUTOFF: with fake-hardware's
own deploy, a node that a stop left off and a delete freed went ACTIVE off
on its next deploy, and nova's power sync stopped the new server. The
deployment's Ironic now deploys with ``powered_deploy``; this checks it on
Ironic alone, a conductor and the API on PostgreSQL, in about 30 s.
"""

from __future__ import annotations

from collections.abc import Iterator
import os
from typing import Any
import uuid

import pytest

from nova_ironic_multi.tests.fixtures import backing
from nova_ironic_multi.tests.fixtures import ironic_pg
from nova_ironic_multi.tests.fixtures import ironic_server
from nova_ironic_multi.tests.fixtures import processes

GROUP = 'g1'


@pytest.fixture(scope='module')
def ironic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pg = backing.Postgres()
    work = str(tmp_path_factory.mktemp('test-ironic'))
    logs = os.path.join(work, 'logs')
    os.makedirs(logs)
    fixture = ironic_pg.IronicPG(pg, backing.run_token() + 'ironic', work,
                                 logs, [GROUP])
    try:
        fixture.create_database()
        fixture.start()
        fixture.wait_ready()
        yield fixture
    finally:
        processes.stop_all(fixture.processes.values())
        for name in pg.created:
            pg.remove(name)


def _provision(ironic: Any, node: str, verb: str, state: str) -> Any:
    cl = ironic.client
    cl.node.set_provision_state(node, verb)
    processes.wait_for(
        'node %s %s' % (node, state),
        lambda: cl.node.get(node).provision_state == state, 60,
        interval=0.2)
    return ironic_server.wait_idle(cl, node, 30)


def test_deploys_end_on_and_tear_downs_end_off(ironic: Any) -> None:
    node = str(uuid.uuid4())
    # A node left off, as a stopped server's is when nova deletes it.
    ironic.enroll([(node, GROUP)], power='off')
    cl = ironic.client
    assert cl.node.get(node).power_state == 'power off'

    after_deploy = _provision(ironic, node, 'active', 'active')
    assert after_deploy.power_state == 'power on'

    after_tear_down = _provision(ironic, node, 'deleted', 'available')
    assert after_tear_down.power_state == 'power off'

    # The next deploy on the freed node boots it again.
    assert _provision(ironic, node, 'active', 'active').power_state == \
        'power on'
