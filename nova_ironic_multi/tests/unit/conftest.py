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
"""The unit tier brings its own Redis, so it needs no machine service.

The server starts before any test module is imported (the tooz tests read
``NIM_REDIS_URL`` at import) and stops when the session ends. With
``NIM_REDIS_URL`` already set, that server is used and nothing is started.
"""

from __future__ import annotations

import os

import pytest

from nova_ironic_multi.tests.fixtures import redis_server

URL_VARIABLE = 'NIM_REDIS_URL'


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(URL_VARIABLE):
        return
    server = redis_server.RedisServer()
    try:
        os.environ[URL_VARIABLE] = server.start()
    except redis_server.RedisUnavailable as e:
        raise pytest.UsageError(str(e)) from e

    def stop() -> None:
        os.environ.pop(URL_VARIABLE, None)
        server.stop()

    config.add_cleanup(stop)
