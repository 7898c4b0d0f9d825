"""Sum pytest's final summary lines in a log: print "N passed, N failed".

Exit status 1 when no test ran or any failed or errored.
"""

import re
import sys

SUMMARY = re.compile(r'^=+ (?P<body>.*\bin [0-9.]+s.*) =+$')
COUNT = re.compile(r'(\d+) (passed|failed|errors?|xpassed)')


def main(path: str) -> int:
    passed = failed = 0
    with open(path, errors='replace') as f:
        for line in f:
            m = SUMMARY.match(line.strip())
            if not m:
                continue
            for n, kind in COUNT.findall(m.group('body')):
                if kind in ('passed', 'xpassed'):
                    passed += int(n)
                else:
                    failed += int(n)
    print('%d passed, %d failed' % (passed, failed))
    return 0 if passed and not failed else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
