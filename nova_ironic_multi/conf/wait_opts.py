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
"""``[ironic_multi]`` options of the waits for Ironic and its requests."""

from oslo_config import cfg

OPTS = [
    cfg.FloatOpt(
        'poll_interval',
        default=2.0,
        min=0.1,
        max=60.0,
        help="""
Seconds between two reads of a node while waiting for Ironic to finish a
deploy, tear-down, power change, rescue or console change.

Possible values:

* A number from 0.1 to 60.

Related options:

* ``deploy_timeout``, ``unprovision_timeout``, ``power_timeout``,
  ``rescue_timeout``, ``[ironic] serial_console_state_timeout``,
  ``[ironic] vnc_console_state_timeout``
"""),
    cfg.IntOpt(
        'deploy_timeout',
        default=0,
        min=0,
        help="""
Seconds to wait for a deploy or rebuild to reach ``active`` before the build
is failed, the node's reservation released and the instance rescheduled.

By default (0) there is no bound: the wait lasts as long as Ironic works on
the node, as with nova's in-tree driver. A stuck deploy is ended by Ironic's
own conductor timeouts (``[conductor] deploy_callback_timeout``,
``[conductor] clean_callback_timeout``, ...), which put the node in ``deploy
failed``; this driver then fails the build at once. A bound here fails a
deploy that Ironic would have completed (long RAID, firmware or image
steps), so set one only to give up earlier than Ironic does.

The wait runs in the build, never in nova's periodic tasks.

Possible values:

* 0 (default): no bound, wait as long as Ironic works on the node.
* A positive integer: seconds.

Related options:

* ``poll_interval``
"""),
    cfg.IntOpt(
        'unprovision_timeout',
        default=600,
        min=0,
        help="""
Seconds to wait, when an instance is deleted (or a failed build is undone),
for its node to leave the deployed states; cleaning counts as done, whatever
the root disk. The Ironic volume targets of an instance booted from volumes
are removed then if the node already rests; else, once Ironic's cleaning is
over, by a resource-tracker period of the host that manages the free node
(or of the host that deleted the instance). The delete never waits for
cleaning. Whatever is left is removed before the node's next deploy.

The wait is never shorter than the tear-down wait of nova's in-tree driver
with the same configuration, ``([ironic] api_max_retries + 1) x [ironic]
api_retry_interval`` seconds (122 at nova's defaults), so a configuration
tuned for that driver waits at least as long here.

Possible values:

* A positive integer: seconds.
* 0: no bound, wait as long as Ironic works on the node.

Related options:

* ``poll_interval``, ``[ironic] api_max_retries``, ``[ironic]
  api_retry_interval``
"""),
    cfg.IntOpt(
        'power_timeout',
        default=0,
        min=0,
        help="""
Seconds to wait for a power on, power off or reboot to finish.

By default (0) there is no bound: the wait lasts until Ironic ends the power
change, successfully or not (Ironic's ``[conductor]
power_state_change_timeout`` and ``soft_power_off_timeout`` bound it on
Ironic's side). With a bound, a soft power off is given nova's shutdown
timeout plus this many seconds.

Possible values:

* 0 (default): no bound.
* A positive integer: seconds.

Related options:

* ``poll_interval``
"""),
    cfg.IntOpt(
        'rescue_timeout',
        default=0,
        min=0,
        help="""
Seconds to wait for a rescue or unrescue to finish.

By default (0) there is no bound: the wait lasts as long as Ironic works on
the node (Ironic's ``[conductor] rescue_callback_timeout`` ends a stuck
rescue with ``rescue failed``).

Possible values:

* 0 (default): no bound.
* A positive integer: seconds.

Related options:

* ``poll_interval``
"""),
    cfg.IntOpt(
        'console_timeout',
        default=None,
        min=1,
        deprecated_for_removal=True,
        deprecated_since='2026.1',
        deprecated_reason="""
nova's own ``[ironic] serial_console_state_timeout`` and ``[ironic]
vnc_console_state_timeout`` are honoured now, as by nova's in-tree driver.
""",
        help="""
Seconds to wait for a node's console to be enabled or disabled.

Deprecated: set ``[ironic] serial_console_state_timeout`` and ``[ironic]
vnc_console_state_timeout`` instead (0 there means no bound). While this
option is set it applies to each console type whose ``[ironic]`` option is
not set, so an existing configuration keeps its behaviour; an ``[ironic]``
option that is set wins. nova 32 (2025.2) has no ``[ironic]
vnc_console_state_timeout``: there this option is the only bound of a VNC
console change, 60 seconds while it is unset.

Possible values:

* Unset (the default): the ``[ironic]`` options apply.
* A positive integer: seconds.

Related options:

* ``[ironic] serial_console_state_timeout``, ``[ironic]
  vnc_console_state_timeout``
"""),
    cfg.FloatOpt(
        'request_timeout',
        default=60.0,
        min=1.0,
        help="""
Seconds after which a single HTTP request to Ironic is abandoned, when
``[ironic] timeout`` is not set. No request to Ironic waits forever.

Possible values:

* A number of seconds, at least 1.

Related options:

* ``[ironic] timeout``: takes precedence when set.
"""),
]
