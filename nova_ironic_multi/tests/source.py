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
"""Where the source tree is, for tests that check what gets shipped."""

from __future__ import annotations

import os
import pathlib


def source_dir() -> pathlib.Path:
    """The checkout the tests came from.

    tox runs the suite against the installed package from a scratch
    directory and names the checkout in ``NIM_SOURCE_DIR``; a run from the
    checkout itself finds it next to this file.
    """
    env = os.environ.get('NIM_SOURCE_DIR')
    if env:
        return pathlib.Path(env)
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        if (parent / 'setup.cfg').is_file():
            return parent
    raise RuntimeError(
        'Cannot find the nova-ironic-multi checkout: set NIM_SOURCE_DIR to '
        'the directory that holds setup.cfg.')
