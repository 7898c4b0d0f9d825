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
"""placement in the benchmark's process, as nova's functional tests run it.

nova's functional ``PlacementFixture`` (placement's WSGI application behind
wsgi-intercept) on a database made beforehand: its models' schema, the
standard traits and resource classes synced when the application loads.
nova's report client is pointed at it, so both what the resource tracker
reports (``bench period``) and this driver's peer markers
(:mod:`nova_ironic_multi.membership.marker`, read every period by the
``servicegroup`` membership) go to a real placement.

Import this module after :mod:`bench.scale`, which chooses nova's
concurrency model before anything imports oslo.service.
"""

from __future__ import annotations

import collections.abc
from typing import Any

import fixtures
from nova.tests.functional import fixtures as func_fixtures
from nova import utils as nova_utils
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import test_fixtures as db_fixtures
from placement.db.sqlalchemy import migration as placement_migration
from placement import db_api as placement_db
from placement.objects import resource_class as placement_resource_class
from placement.objects import trait as placement_trait


class _Fixture(func_fixtures.PlacementFixture):  # type: ignore[misc]
    """nova's placement fixture on a database made beforehand."""

    def __init__(self, url: str) -> None:
        super().__init__(db=False)
        self._url = url

    def _configure_placement(self, conf_fixture: Any) -> None:
        conf_fixture.config(connection=self._url, group='placement_database')


class InProcessPlacement(fixtures.Fixture):  # type: ignore[misc]
    """placement on the empty database ``url``, nova's client pointed at it.

    :param url: an SQLAlchemy URL of an empty database (sqlite or
        PostgreSQL).
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.fixture: _Fixture | None = None

    def _setUp(self) -> None:
        # A facade of its own: placement's engine facade starts once, so
        # each benchmark cell plugs a new one in, as nova's database
        # fixtures do, and the next cell replaces it.
        facade = enginefacade.transaction_context()
        self.useFixture(db_fixtures.ReplaceEngineFacadeFixture(
            placement_db.placement_context_manager, facade))
        facade.configure(connection=self.url)
        placement_migration.create_schema(facade.writer.get_engine())
        # Synced once a process; this database is new.
        placement_trait._TRAITS_SYNCED = False
        placement_resource_class._RESOURCE_CLASSES_SYNCED = False
        self.fixture = self.useFixture(_Fixture(self.url))
        # The fixture answers the report client's get/put/post/delete; the
        # client's own adapter (openstacksdk, from the service catalog) is
        # never used, so it is the fixture's and needs no Keystone.
        self.useFixture(fixtures.MonkeyPatch(
            'nova.utils.get_sdk_adapter',
            self._adapter(nova_utils.get_sdk_adapter)))
        # A report client made before this fixture (the singleton of an
        # earlier cell) would keep its own adapter.
        self.useFixture(fixtures.MonkeyPatch(
            'nova.scheduler.client.report.PLACEMENTCLIENT', None))

    def _adapter(self, real: collections.abc.Callable[..., Any]
                 ) -> collections.abc.Callable[..., Any]:
        def get_sdk_adapter(service_type: str, *args: Any,
                            **kwargs: Any) -> Any:
            if service_type == 'placement':
                assert self.fixture is not None
                return self.fixture._client
            return real(service_type, *args, **kwargs)
        return get_sdk_adapter

    def engine(self) -> Any:
        """placement's database engine (for counts)."""
        return placement_db.get_placement_engine()
