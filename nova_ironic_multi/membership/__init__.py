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
"""Membership plugins (namespace ``nova_ironic_multi.membership``)."""

from __future__ import annotations

from oslo_config import cfg

from nova_ironic_multi import loader
from nova_ironic_multi.membership import base

Membership = base.Membership
MembershipUnavailable = base.MembershipUnavailable
MembershipMisconfigured = base.MembershipMisconfigured


def load(name: str, conf: cfg.ConfigOpts, host: str,
         observer: bool = False) -> Membership:
    """Build the named membership plugin for ``host``.

    An ``observer`` (the CLI) reads the peers without ever joining them.
    """
    cls = loader.plugin(loader.MEMBERSHIP_NAMESPACE, name,
                        '[ironic_multi] membership_driver')
    plugin: Membership = cls(conf, host, observer=observer)
    return plugin
