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
"""Ironic's provision and power state names, as its API reports them."""

from __future__ import annotations

NOSTATE = None

# Provision states.
ENROLL = 'enroll'
MANAGEABLE = 'manageable'
AVAILABLE = 'available'
ACTIVE = 'active'
DEPLOYING = 'deploying'
DEPLOYWAIT = 'wait call-back'
DEPLOYFAIL = 'deploy failed'
DEPLOYHOLD = 'deploy hold'
DELETING = 'deleting'
DELETED = 'deleted'
CLEANING = 'cleaning'
CLEANWAIT = 'clean wait'
CLEANFAIL = 'clean failed'
CLEANHOLD = 'clean hold'
ERROR = 'error'
REBUILD = 'rebuild'
RESCUE = 'rescue'
RESCUEWAIT = 'rescue wait'
RESCUEFAIL = 'rescue failed'
RESCUING = 'rescuing'
UNRESCUING = 'unrescuing'
UNRESCUEFAIL = 'unrescue failed'
SERVICING = 'servicing'
SERVICEWAIT = 'service wait'
SERVICEFAIL = 'service failed'
SERVICEHOLD = 'service hold'

# Power states.
POWER_ON = 'power on'
POWER_OFF = 'power off'
POWER_ERROR = 'error'

#: States from which deleting an instance means asking Ironic to undeploy
#: (Ironic's tear-down then does all the clean-up, nova bug 2019977).
DEPLOYED_LIKE = frozenset({
    ACTIVE, DEPLOYFAIL, ERROR, DEPLOYWAIT, DEPLOYING, DEPLOYHOLD,
    RESCUE, RESCUING, RESCUEWAIT, RESCUEFAIL, UNRESCUING, UNRESCUEFAIL,
    SERVICING, SERVICEWAIT, SERVICEFAIL, SERVICEHOLD,
})

#: Deployed-like states Ironic 39 accepts an undeploy (``deleted``) from.
UNDEPLOYABLE = frozenset({
    ACTIVE, DEPLOYWAIT, DEPLOYFAIL, ERROR, RESCUE, RESCUEWAIT, RESCUEFAIL,
    UNRESCUEFAIL, SERVICEWAIT, SERVICEFAIL,
})

#: Holds Ironic 39 leaves on ``abort`` only (to deploy failed, or through
#: service failed back to active), never on ``deleted``.
ABORT_FIRST = frozenset({DEPLOYHOLD, SERVICEHOLD})

#: States a conductor is working in: Ironic 39 accepts no provision request
#: until it leaves them by itself.
CONDUCTOR_BUSY = frozenset({DEPLOYING, RESCUING, UNRESCUING, SERVICING})

#: States in which Ironic is already tearing a node down.
TEARING_DOWN = frozenset({DELETING, CLEANING, CLEANWAIT, CLEANHOLD})

#: States that, from nova's point of view, mean "no longer deployed".
UNPROVISIONED = frozenset({NOSTATE, AVAILABLE, CLEANING, CLEANWAIT,
                           CLEANFAIL, CLEANHOLD, MANAGEABLE, ENROLL})

#: Every provision state this driver knows of; anything else is treated as
#: deployed, so deleting an instance always undeploys (nova bug 2131960).
KNOWN_PROVISION_STATES = frozenset({
    NOSTATE, ENROLL, MANAGEABLE, AVAILABLE, DELETED, CLEANFAIL,
    'verifying', 'inspecting', 'inspect failed', 'inspect wait',
    'adopting', 'adopt failed',
}) | DEPLOYED_LIKE | TEARING_DOWN
