# Sourced by scripts/test: podman as this kind of machine needs it, configured through
# environment variables so the machine's own /etc/containers is never changed.
#   runtime runc, cgroupfs manager, vfs storage, explicit ulimits at or below the hard limits.
mesh_podman_dir="${MESH_PODMAN_DIR:-$PWD/target/podman}"
mkdir -p "$mesh_podman_dir"
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=65536; [ "$nofile" -gt 65536 ] && nofile=65536
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=4096; [ "$nproc" -gt 4096 ] && nproc=4096
cat > "$mesh_podman_dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
cat > "$mesh_podman_dir/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$mesh_podman_dir/storage"
runroot = "$mesh_podman_dir/run"
CONF
export CONTAINERS_CONF="$mesh_podman_dir/containers.conf"
export CONTAINERS_STORAGE_CONF="$mesh_podman_dir/storage.conf"
export MESH_PODMAN_ULIMITS="--ulimit nofile=${nofile}:${nofile} --ulimit nproc=${nproc}:${nproc}"
export MESH_TEST_IMAGE="localhost/mesh-busybox:latest"

# The test image: busybox from Debian's busybox-static, imported (nothing is pulled). Its
# label says which recipe made it; an image of an older recipe is made again (recipe 2: a root
# any user can enter, so a container runs as a user other than root, and `id`).
mesh_test_image_recipe=2
if [ "$(podman image inspect --format '{{index .Labels "io.mesh.test-image"}}' "$MESH_TEST_IMAGE" 2>/dev/null)" != "$mesh_test_image_recipe" ]; then
  img=$(mktemp -d)
  chmod 755 "$img"
  mkdir -p "$img/bin" "$img/tmp" "$img/media" "$img/config"
  chmod 1777 "$img/tmp"
  cp /bin/busybox "$img/bin/busybox"
  for applet in sh sleep httpd cat echo ls true false touch date id; do ln -s busybox "$img/bin/$applet"; done
  tar -C "$img" -cf "$img.tar" .
  podman import --change 'CMD ["/bin/sh"]' --change "LABEL io.mesh.test-image=$mesh_test_image_recipe" \
    "$img.tar" "$MESH_TEST_IMAGE" >/dev/null
  rm -rf "$img" "$img.tar"
fi
