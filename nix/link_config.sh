# Run before hermesd starts under Home-Manager (nix/home-manager.nix, ExecStartPre=):
# links HERMES_HOME/config.yaml to the config.yaml Home-Manager rendered from the settings.
# A config.yaml the user wrote by hand before is moved aside to config.yaml.before-home-manager
# (an older one of those kept as a numbered backup), never overwritten.
#
#     link_config.sh HERMES_HOME RENDERED_CONFIG
set -eu
home=$1 target=$2
mkdir -p -m 0700 "$home"
if [ -e "$home/config.yaml" ] && [ ! -L "$home/config.yaml" ]; then
  mv --backup=numbered "$home/config.yaml" "$home/config.yaml.before-home-manager"
fi
ln -sfn "$target" "$home/config.yaml"
