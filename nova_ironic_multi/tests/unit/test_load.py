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
"""stock nova loads the driver through its real code path."""

from __future__ import annotations

import inspect
import pathlib
import sys
import sysconfig
import textwrap

from nova import test
from nova.virt import driver as virt_driver
from nova.virt import virtapi

from nova_ironic_multi import compat
from nova_ironic_multi import driver as nim_driver


class LoadComputeDriverTest(test.NoDBTestCase):

    def test_nova_loads_this_package_from_the_installed_shim(self) -> None:
        drv = virt_driver.load_compute_driver(
            virtapi.VirtAPI(), 'nova_ironic_multi.IronicDriver')
        self.assertIsInstance(drv, virt_driver.ComputeDriver)
        self.assertIs(type(drv), nim_driver.IronicDriver)

        # The shim nova imported is a real file inside nova's own package.
        import nova.virt.nova_ironic_multi as shim
        nova_virt = pathlib.Path(virt_driver.__file__).resolve().parent
        self.assertEqual(nova_virt / 'nova_ironic_multi' / '__init__.py',
                         pathlib.Path(shim.__file__).resolve())
        # ...and the class comes from the installed package, not a checkout.
        purelib = pathlib.Path(sysconfig.get_paths()['purelib']).resolve()
        self.assertTrue(
            pathlib.Path(inspect.getfile(nim_driver)).resolve()
            .is_relative_to(purelib),
            'tests must run against the installed (non-editable) package')

    def test_configured_compute_driver_is_honoured(self) -> None:
        self.flags(compute_driver='nova_ironic_multi.IronicDriver')
        drv = virt_driver.load_compute_driver(virtapi.VirtAPI())
        self.assertIsInstance(drv, nim_driver.IronicDriver)

    def test_unknown_class_name_is_a_load_failure_naming_the_choices(
            self) -> None:
        with self.assertLogs('nova.virt.driver', 'ERROR') as logs:
            self.assertRaises(
                SystemExit, virt_driver.load_compute_driver,
                virtapi.VirtAPI(), 'nova_ironic_multi.NoSuchDriver')
        text = '\n'.join(logs.output)
        self.assertIn("'NoSuchDriver' is not a known plugin", text)
        self.assertIn('IronicDriver', text)

    def test_a_deployment_can_swap_the_class_by_entry_point(self) -> None:
        tmp = pathlib.Path(self.useFixture(
            __import__('fixtures').TempDir()).path)
        (tmp / 'nim_swapped_driver.py').write_text(textwrap.dedent('''
            from nova_ironic_multi import driver

            class SwappedDriver(driver.IronicDriver):
                pass
        '''))
        dist = tmp / 'nim_swapped-1.0.dist-info'
        dist.mkdir()
        (dist / 'METADATA').write_text(
            'Metadata-Version: 2.1\nName: nim-swapped\nVersion: 1.0\n')
        (dist / 'entry_points.txt').write_text(
            '[nova_ironic_multi.drivers]\n'
            'SwappedDriver = nim_swapped_driver:SwappedDriver\n')
        sys.path.insert(0, str(tmp))
        self.addCleanup(sys.path.remove, str(tmp))
        self.addCleanup(sys.modules.pop, 'nim_swapped_driver', None)
        self._fresh_entry_points()

        drv = virt_driver.load_compute_driver(
            virtapi.VirtAPI(), 'nova_ironic_multi.SwappedDriver')
        self.assertEqual('SwappedDriver', type(drv).__name__)
        self.assertIsInstance(drv, nim_driver.IronicDriver)


    def _distribution(self, dist: str, module: str) -> None:
        """A distribution registering ``IronicDriver`` as a subclass."""
        tmp = pathlib.Path(self.useFixture(
            __import__('fixtures').TempDir()).path)
        (tmp / (module + '.py')).write_text(textwrap.dedent('''
            from nova_ironic_multi import driver

            class SubclassDriver(driver.IronicDriver):
                pass
        '''))
        info = tmp / ('%s-1.0.dist-info' % dist.replace('-', '_'))
        info.mkdir()
        (info / 'METADATA').write_text(
            'Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n' % dist)
        (info / 'entry_points.txt').write_text(
            '[nova_ironic_multi.drivers]\n'
            'IronicDriver = %s:SubclassDriver\n' % module)
        sys.path.insert(0, str(tmp))
        self.addCleanup(sys.path.remove, str(tmp))
        self.addCleanup(sys.modules.pop, module, None)
        self._fresh_entry_points()

    def _fresh_entry_points(self) -> None:
        # stevedore keeps each namespace's entry points for the process.
        self.useFixture(__import__('fixtures').MonkeyPatch(
            'stevedore.extension.ExtensionManager.ENTRY_POINT_CACHE', {}))
        self.useFixture(__import__('fixtures').MonkeyPatch(
            'nova_ironic_multi.loader._LOGGED', set()))

    def test_another_distribution_replaces_the_class_under_its_name(
            self) -> None:
        # As the shim's docstring and the first release note say. stevedore
        # raised MultipleMatches, nothing caught it, and nova-compute died
        # with a traceback.
        self._distribution('site-driver', 'nim_site_driver')
        with self.assertLogs('nova_ironic_multi.loader', 'INFO') as logs:
            drv = virt_driver.load_compute_driver(
                virtapi.VirtAPI(), 'nova_ironic_multi.IronicDriver')
        self.assertEqual('nim_site_driver', type(drv).__module__)
        self.assertIsInstance(drv, nim_driver.IronicDriver)
        self.assertIn("nim_site_driver:SubclassDriver from distribution "
                      "site-driver, which replaces nova-ironic-multi's",
                      logs.output[0])

    def test_two_replacements_are_refused_naming_both(self) -> None:
        self._distribution('site-driver', 'nim_site_driver')
        self._distribution('other-driver', 'nim_other_driver')
        with self.assertLogs('nova.virt.driver', 'ERROR') as logs:
            self.assertRaises(
                SystemExit, virt_driver.load_compute_driver,
                virtapi.VirtAPI(), 'nova_ironic_multi.IronicDriver')
        text = '\n'.join(logs.output)
        self.assertIn("'IronicDriver' in namespace nova_ironic_multi.drivers "
                      "(option compute_driver) is registered by "
                      "nova-ironic-multi (nova_ironic_multi.driver:"
                      "IronicDriver), other-driver (nim_other_driver:"
                      "SubclassDriver), site-driver (nim_site_driver:"
                      "SubclassDriver)", text)
        self.assertIn('Fix: uninstall all but one of them.', text)
        self.assertNotIn('MultipleMatches', text)


class PublicAPITest(test.NoDBTestCase):

    def test_public_api_signatures_match_compute_driver(self) -> None:
        # Methods that only a newer nova has (and calls) are checked
        # against that nova; an older one never calls them.
        later = {name: getattr(nim_driver.IronicDriver, name)
                 for name in compat.LATER_DRIVER_METHODS
                 if not compat.nova_has(name)}
        base = type('RunningNovaDriver', (virt_driver.ComputeDriver,), later)
        self.assertPublicAPISignatures(
            base(None), nim_driver.IronicDriver(None))


def test_package_never_imports_eventlet() -> None:
    # nova-compute runs on native threads and forbids eventlet by default.
    import nova_ironic_multi
    root = pathlib.Path(nova_ironic_multi.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob('*.py')
                 if 'tests' not in p.parts and
                 'import eventlet' in p.read_text()]
    assert offenders == []
