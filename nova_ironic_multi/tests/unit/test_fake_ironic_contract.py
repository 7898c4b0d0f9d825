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
"""``FakeIronic``, the unit tests' main seam, answers as ``Ironic`` does.

Every public method and property of :class:`nova_ironic_multi.ironic.Ironic`
exists on the fake with the same signature (names, kinds, defaults and
annotations of the parameters, and the return annotation), so a test that
passes against the fake calls the product the way the product calls
Ironic. The fake may have more (its set-up and inspection helpers).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from nova_ironic_multi import ironic
from nova_ironic_multi.tests.unit import fake_ironic


def _public(cls: type) -> dict[str, Any]:
    """Public attributes of ``cls``, its bases' included.

    (The most derived wins: the client's requests and its session's
    methods alike.)
    """
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):    # (not object)
        found.update((name, value) for name, value in vars(klass).items()
                     if not name.startswith('_'))
    return found


def _methods(cls: type) -> list[str]:
    return sorted(name for name, value in _public(cls).items()
                  if inspect.isfunction(value))


def _properties(cls: type) -> list[str]:
    return sorted(name for name, value in _public(cls).items()
                  if isinstance(value, property))


def _shape(function: Any) -> tuple[Any, ...]:
    """What a caller relies on: each parameter and the return annotation.

    (The modules use postponed annotations, so each is the text written.)
    """
    signature = inspect.signature(function)
    return (tuple((p.name, p.kind, p.default, p.annotation)
                  for p in signature.parameters.values()),
            signature.return_annotation)


def test_the_fake_has_every_public_method_of_ironic() -> None:
    missing = [name for name in _methods(ironic.Ironic)
               if not callable(getattr(fake_ironic.FakeIronic, name, None))]
    assert missing == []


@pytest.mark.parametrize('name', _methods(ironic.Ironic))
def test_each_method_has_the_signature_of_ironics(name: str) -> None:
    real = getattr(ironic.Ironic, name)
    fake = getattr(fake_ironic.FakeIronic, name, None)
    assert fake is not None, 'FakeIronic lacks %s' % name
    assert _shape(fake) == _shape(real), (
        'FakeIronic.%s%s differs from Ironic.%s%s'
        % (name, inspect.signature(fake), name, inspect.signature(real)))


@pytest.mark.parametrize('name', _properties(ironic.Ironic))
def test_each_property_reads_on_the_fake(name: str) -> None:
    real: property = getattr(ironic.Ironic, name)
    value = getattr(fake_ironic.FakeIronic(), name)
    assert real.fget is not None
    expected = inspect.signature(real.fget).return_annotation
    kinds = {'bool': bool, 'tuple[int, int]': tuple}
    assert isinstance(value, kinds[expected]), (name, value, expected)


def test_the_sessions_methods_are_in_the_contract() -> None:
    # Split across classes, the client's surface is still all checked.
    assert {'connect', 'offers', 'fail_fast', 'get_node'} <= set(
        _methods(ironic.Ironic))
    assert {'version', 'failing_fast'} <= set(_properties(ironic.Ironic))


def test_the_contract_can_fail() -> None:
    # A fake method whose signature drifted is caught, not waved through.
    class Drifted(fake_ironic.FakeIronic):
        def get_node(  # type: ignore[override]
                self, node_uuid: str) -> Any:    # (no ``once``)
            return None

    assert _shape(Drifted.get_node) != _shape(ironic.Ironic.get_node)
