#!/bin/sh
# mesh backup: runs {{schedule}}, keeps {{keep}} copies in /var/backups/mesh
set -eu
echo "backing up"
