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
"""The module nova imports for ``compute_driver = nova_ironic_multi.X``.

nova's ``load_compute_driver`` only ever imports ``nova.virt.<name>``, so this
package installs this one directory into nova's own ``nova/virt``. The class
is looked up lazily through stevedore (namespace ``nova_ironic_multi.drivers``)
so that a deployment can swap it by registering an entry point under the same
name from a distribution of its own, which is loaded instead of this
package's; two such distributions are refused, naming both
(:mod:`nova_ironic_multi.loader`).
"""

from nova_ironic_multi import loader


def __getattr__(name: str) -> type:
    return loader.driver_class(name)
