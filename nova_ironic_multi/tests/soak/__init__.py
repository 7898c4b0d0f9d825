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
"""A seeded chaos soak on the e2e tier's deployment.

``python -m nova_ironic_multi.tests.soak --minutes N --seed S`` (or ``tox
-e soak -- --minutes N --seed S``): users' traffic through a seeded
schedule of faults, invariants checked while it runs and at the end, and a
table of what happened. See doc/source/reliability.rst.

* :mod:`.schedule`: the faults of a seed (pure);
* :mod:`.faults`: how each is brought and lifted;
* :mod:`.workload`: the demo user's requests and how each ended;
* :mod:`.observe`: reading the databases and the computes' logs;
* :mod:`.invariants`: what must hold (pure), :mod:`.checker`: when;
* :mod:`.report`: the table; :mod:`.runner`: all of it, in order.
"""
