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
"""What a flavor and an image ask of Ironic: capabilities and traits.

The traits sent are compared with nova's own readers: its scheduler (which
traits placement required of the node) and its in-tree Ironic driver (what
it sends), so a flavor behaves the same after a migration to this driver.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from nova import objects
from nova.scheduler import utils as scheduler_utils
from nova import test
from nova.virt.ironic import patcher

from nova_ironic_multi.actions import instance_info


def _flavor(extra_specs: dict[str, str]) -> Any:
    return objects.Flavor(name='bm', vcpus=1, memory_mb=512, root_gb=10,
                          ephemeral_gb=0, swap=0, extra_specs=extra_specs)


def _image(traits: list[str]) -> Any:
    # Glance's form: nova reads ``trait:NAME = required`` image properties
    # into ``traits_required``.
    return objects.ImageMeta.from_dict(
        {'properties': {'trait:' + name: 'required' for name in traits}})


def in_tree_traits(extra_specs: dict[str, str],
                   image_traits: list[str]) -> list[str]:
    """The traits nova's in-tree Ironic driver puts in instance_info."""
    flavor = _flavor(extra_specs)
    instance = mock.Mock(flavor=flavor, display_name='x')
    node = mock.Mock(properties={})
    patch = patcher.create(node).get_deploy_patch(
        instance, _image(image_traits), flavor, mock.Mock(),
        boot_from_volume=True)
    for op in patch:
        if op['path'] == '/instance_info/traits':
            return list(op['value'])
    return []


def scheduler_traits(extra_specs: dict[str, str]) -> set[str]:
    """The traits nova's scheduler asked placement to require."""
    spec = objects.RequestSpec(
        flavor=_flavor(extra_specs), image=_image([]),
        requested_resources=[], is_bfv=False)
    request = scheduler_utils.ResourceRequest.from_request_spec(
        spec, enable_pinning_translate=False)
    traits: set[str] = request.all_required_traits
    return traits


class FlavorRequestsTest(test.NoDBTestCase):

    def traits(self, extra_specs: dict[str, str],
               image_traits: list[str] | None = None) -> list[str]:
        return instance_info.flavor_requests(extra_specs,
                                             image_traits or [])[1]

    def test_every_group_suffix_nova_accepts_is_sent(self) -> None:
        specs = {
            'trait:CUSTOM_PLAIN': 'required',
            'trait1:CUSTOM_DIGITS': 'required',
            'trait_FOO:CUSTOM_NAMED': 'required',
            'trait-x:CUSTOM_DASH': 'required',
            'traits:CUSTOM_S': 'required',
            'trait' + 'a' * 64 + ':CUSTOM_LONGEST': 'required',
        }
        expected = ['CUSTOM_PLAIN', 'CUSTOM_DIGITS', 'CUSTOM_NAMED',
                    'CUSTOM_DASH', 'CUSTOM_S', 'CUSTOM_LONGEST']
        self.assertEqual(expected, self.traits(specs))
        # The same traits, in the same order, as nova's in-tree driver; and
        # exactly the ones the scheduler required of the node.
        self.assertEqual(in_tree_traits(specs, []), self.traits(specs))
        self.assertEqual(scheduler_traits(specs), set(expected))

    def test_keys_nova_does_not_read_as_traits_are_not_sent(self) -> None:
        # The scheduler did not require these of the node, so sending them
        # would make Ironic refuse a node that lacks them.
        specs = {
            'trait.x:CUSTOM_DOT': 'required',
            'trait' + 'a' * 65 + ':CUSTOM_TOO_LONG': 'required',
            'trait2:CUSTOM_FORBIDDEN': 'forbidden',
            'trait_FOO:CUSTOM_OTHER': 'preferred',
            'hw:cpu_policy': 'dedicated',
            'traitless': 'required',
        }
        self.assertEqual([], self.traits(specs))
        self.assertEqual(set(), scheduler_traits(specs))

    def test_image_traits_follow_the_flavor_and_capabilities_stay(
            self) -> None:
        specs = {'capabilities:boot_mode': 'uefi',
                 'trait_gpu:CUSTOM_GPU': 'required'}
        capabilities, traits = instance_info.flavor_requests(
            specs, ['CUSTOM_IMAGE'])
        self.assertEqual({'boot_mode': 'uefi'}, capabilities)
        self.assertEqual(['CUSTOM_GPU', 'CUSTOM_IMAGE'], traits)
        self.assertEqual(in_tree_traits(specs, ['CUSTOM_IMAGE']), traits)


# Suffixes nova accepts (letters, digits, _ and -, 1 to 64) and some it
# does not (other characters, 65 or more).
_SUFFIX = st.text(alphabet='aZ09_-.+ ', max_size=66)
_SPEC = st.tuples(
    _SUFFIX,
    st.from_regex(r'CUSTOM_[A-Z0-9_]{1,8}', fullmatch=True),
    st.sampled_from(['required', 'forbidden']))


class FlavorRequestsPropertyTest(test.NoDBTestCase):

    @settings(max_examples=200, deadline=None)
    @given(specs=st.lists(_SPEC, max_size=6),
           image=st.lists(st.from_regex(r'CUSTOM_I[0-9]', fullmatch=True),
                          max_size=2))
    def test_sends_what_the_scheduler_required_as_in_tree_sends_it(
            self, specs: list[tuple[str, str, str]],
            image: list[str]) -> None:
        extra_specs = {'trait%s:%s' % (suffix, name): value
                       for suffix, name, value in specs}
        # Per key: what nova's scheduler required, in the in-tree driver's
        # form and order; keys the scheduler ignores send nothing.
        expected: list[str] = []
        for key, value in extra_specs.items():
            if scheduler_traits({key: value}):
                expected += in_tree_traits({key: value}, [])
        expected += image
        sent = instance_info.flavor_requests(extra_specs, image)[1]
        self.assertEqual(expected, sent)
        from_flavor = sent[:len(sent) - len(image)]
        self.assertEqual(scheduler_traits(extra_specs), set(from_flavor))
