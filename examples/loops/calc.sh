#!/bin/sh
# calc.sh A B: prints the sum of A and B.
echo $(( $1 - $2 ))
