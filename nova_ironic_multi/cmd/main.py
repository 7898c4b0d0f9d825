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
"""``nova-ironic-multi``: see and steer the division of Ironic nodes.

Run it where ``nova-manage`` runs, with nova's configuration::

    nova-ironic-multi --config-file /etc/nova/nova.conf ring show
    nova-ironic-multi ... ring explain NODE_UUID
    nova-ironic-multi ... ring simulate --add host4 --remove host2
    nova-ironic-multi ... takeover --from host3 --to host1 [--execute]
    nova-ironic-multi ... shards plan|apply --count 64 [--relabel-all]
    nova-ironic-multi ... health [--state-file PATH]
    nova-ironic-multi ... upgrade check

Every command takes ``--format json``.
"""

from __future__ import annotations

# nova chooses its concurrency model when first imported: this short-lived
# tool runs on native threads (eventlet poisoned), like nova-compute.
from nova_ironic_multi import compat

compat.patch_for_threads()

import argparse  # noqa: E402
import sys  # noqa: E402
from typing import Any, TextIO  # noqa: E402

from oslo_config import cfg  # noqa: E402

CONF = cfg.CONF


def _format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table', help='Output format.')


def add_parsers(subparsers: Any) -> None:
    ring = subparsers.add_parser('ring', help='Inspect the ring.')
    actions = ring.add_subparsers(dest='action', metavar='ACTION')
    actions.required = True
    show = actions.add_parser(
        'show', help='Members, their liveness, nodes per host, balance.')
    _format(show)
    explain = actions.add_parser(
        'explain', help='Who manages a node, why, and who would take over.')
    explain.add_argument('node', help='Ironic node UUID.')
    _format(explain)
    simulate = actions.add_parser(
        'simulate', help='What would move if hosts joined or left.')
    simulate.add_argument('--add', action='append', default=[],
                          metavar='HOST', help='A host that would join.')
    simulate.add_argument('--remove', action='append', default=[],
                          metavar='HOST', help='A host that would leave.')
    _format(simulate)
    takeover = subparsers.add_parser(
        'takeover', help="Move a dead host's instances to a live peer.")
    takeover.add_argument('--from', dest='source', required=True,
                          metavar='HOST', help='The dead, forced-down host.')
    takeover.add_argument('--to', dest='dest', required=True,
                          metavar='HOST', help='A live peer.')
    takeover.add_argument('--execute', action='store_true',
                          help='Move (without it: only show the plan).')
    _format(takeover)
    shards = subparsers.add_parser(
        'shards', help='Label Ironic nodes with shards (divide = shards).')
    verbs = shards.add_subparsers(dest='action', metavar='ACTION')
    verbs.required = True
    for verb, text in (('plan', 'Show the labels and what would move.'),
                       ('apply', 'Show, then write the labels.')):
        parser = verbs.add_parser(verb, help=text)
        parser.add_argument('--count', type=int, required=True,
                            metavar='N', help='The number of shards.')
        parser.add_argument('--relabel-all', action='store_true',
                            help='Relabel every node, not only the nodes '
                                 'without a shard.')
        _format(parser)
    probe = subparsers.add_parser(
        'health', help='Whether this host\'s nova-compute divides: exit 0 '
        'healthy, 1 degraded, 2 broken (reads only its state file).')
    probe.add_argument('--state-file', metavar='PATH',
                       help='The file nova-compute writes (default: as '
                            '[ironic_multi] state_file says).')
    probe.add_argument('--stale-after', type=float, metavar='SECONDS',
                       help='Broken when the file is older (default: 5 '
                            'periods, at least 300 s).')
    _format(probe)
    upgrade = subparsers.add_parser(
        'upgrade', help='Check that the deployment is ready (exit 0 '
        'success, 1 warning, 2 failure).')
    checks = upgrade.add_subparsers(dest='action', metavar='ACTION')
    checks.required = True
    check = checks.add_parser(
        'check', help='Every host of a scope divides by the same settings; '
        'Ironic\'s API and policy; one cell per scope; the nova.virt shim; '
        'nova\'s [ironic] options.')
    _format(check)


COMMAND = cfg.SubCommandOpt('command', title='Commands',
                            handler=add_parsers,
                            help='ring show|explain|simulate, takeover, '
                                 'shards plan|apply, health, upgrade check')


def run(command: Any, out: TextIO = sys.stdout,
        err: TextIO = sys.stderr) -> int:
    """Run a parsed command; errors are explained, not dumped."""
    if command.name == 'health':
        # A probe, run every few seconds: it imports only what it reads.
        from nova_ironic_multi.cmd import health
        return health.run(CONF, command.state_file, command.stale_after,
                          out, command.format)
    if command.name == 'upgrade':
        from nova_ironic_multi.cmd import upgrade
        try:
            return upgrade.run(CONF, out, command.format)
        except Exception as e:
            # oslo.upgradecheck's convention: 255 when a check broke.
            import traceback
            err.write('Error: a check failed to run: %s\n%s' % (
                e, traceback.format_exc()))
            return 255
    from nova_ironic_multi.cmd import fleet
    from nova_ironic_multi.cmd import ring
    from nova_ironic_multi.cmd import shards
    from nova_ironic_multi.cmd import takeover
    from nova_ironic_multi.division import partition
    from nova_ironic_multi import ironic
    from nova_ironic_multi import loader
    from nova_ironic_multi import membership
    try:
        if command.name == 'takeover':
            return takeover.run(command.source, command.dest,
                                command.execute, out, command.format, CONF)
        if command.name == 'shards':
            return shards.run(CONF, command.action, command.count,
                              command.relabel_all, out, command.format)
        view = fleet.gather(CONF)
        if command.action == 'show':
            return ring.show(view, out, command.format)
        if command.action == 'explain':
            return ring.explain(view, command.node, out, command.format)
        return ring.simulate(view, command.add, command.remove, out,
                             command.format)
    except (takeover.Refused, partition.InvalidPartition,
            loader.PluginError, shards.BadArgument) as e:
        err.write('%s\n' % e)
        return 2
    except (ironic.IronicError, membership.MembershipUnavailable) as e:
        err.write('Cannot read the fleet: %s\n' % e)
        return 1


def configure(argv: list[str]) -> None:
    """Read the command line and nova's files as ``nova-manage`` does.

    With nova's RPC set up (nothing connects until a message is sent):
    reading a cell mapping needs its options (``transport_url``).
    """
    import nova.conf  # noqa: F401 (nova's options: state_path, host)

    from nova_ironic_multi import conf as nim_conf
    nim_conf.register_opts(CONF)
    CONF.register_cli_opt(COMMAND)
    # The health probe reads one file: the files and the command line are
    # all it needs (nova's set-up below costs a second or more).
    CONF(argv, project='nova')
    if CONF.command.name == 'health':
        return
    CONF.clear()

    from nova import config as nova_config
    from nova import objects
    nova_config.parse_args([sys.argv[0]] + argv)
    objects.register_all()


def main(argv: list[str] | None = None) -> int:
    configure(sys.argv[1:] if argv is None else argv)
    return run(CONF.command)


if __name__ == '__main__':
    sys.exit(main())
