#!/bin/sh
# Usage: fake_nodes.sh NODES COMMAND [ARGS...]
# Runs COMMAND with BASP_NODE_ID set so that the ranks of one machine pretend to be NODES nodes, dealt
# round-robin (rank r on node r % NODES), as SLURM --distribution=cyclic and Open MPI --map-by node number them.
nodes=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
BASP_NODE_ID="fake-node-$((rank % nodes))"
export BASP_NODE_ID
exec "$@"
