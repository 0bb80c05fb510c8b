#!/bin/bash
# runcase.sh TREE CASEDIR : runs CASEDIR/cmd (args, one per line, relative to CASEDIR) with TREE's clustersim
# under timeout 60 and a 8 GiB address-space cap; writes CASEDIR/out.<tag>
tree=$1; dir=$2; tag=$3; lim=${LIMIT_S:-60}
cd "$dir"; rm -f o.json
mapfile -t args < cmd
start=$(date +%s.%N)
/usr/bin/time -f '%M %e' -o time.$tag timeout -s KILL $lim prlimit --as=8589934592 "$tree/.venv/bin/clustersim" "${args[@]}" > stdout.$tag 2> stderr.$tag < /dev/null
echo $? > rc.$tag
