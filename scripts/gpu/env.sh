# Sourced by the scripts run on the GPU host: puts the carried binaries where the carried test
# executables expect them and sets $r (results folder), $bin (gpfarm) and GPFARMD.
out=${OUT:-out}; mkdir -p "$out/r"; r="$out/r"
carry=.carry
built=$(cat $carry/target_dir)
mkdir -p "$built" && cp $carry/gpfarm $carry/gpfarmd "$built/"
export GPFARMD=$built/gpfarmd
bin=$built/gpfarm
