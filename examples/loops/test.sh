#!/bin/sh
# The project's test suite. Exit 0 when every test passes, 1 when one fails.
got=$(sh calc.sh 2 3)
if [ "$got" = 5 ]; then
  echo "add: ok"
  echo "1 passed"
  exit 0
fi
echo "add: FAIL, calc.sh 2 3 printed $got, expected 5"
echo "1 failed"
exit 1
