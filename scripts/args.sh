# Sourced by the scripts that take at most one folder: parse_one_folder SCRIPT WHAT DEFAULT "$@"
# sets FOLDER to the folder given, made absolute (it is the caller's, and the scripts cd into
# the repository), or to DEFAULT. -h/--help runs the caller's usage() and exits 0; an unknown
# option, two folders or an empty one exit 2 with a line and the usage on stderr.
parse_one_folder() {
  local script="$1" what="$2" default="$3"
  shift 3
  local args=()
  while [ $# -gt 0 ]; do
    case "$1" in
      -h|--help) usage; exit 0 ;;
      --) shift; args+=("$@"); break ;;
      -*) echo "$script: unknown option '$1'" >&2; usage >&2; exit 2 ;;
      *) args+=("$1"); shift ;;
    esac
  done
  if [ ${#args[@]} -gt 1 ]; then
    echo "$script: too many arguments (${#args[@]}; at most one: $what)" >&2; usage >&2; exit 2
  fi
  if [ ${#args[@]} -eq 1 ] && [ -z "${args[0]}" ]; then
    echo "$script: $what is empty" >&2; usage >&2; exit 2
  fi
  FOLDER="$default"
  if [ ${#args[@]} -eq 1 ]; then FOLDER="$(realpath -m -- "${args[0]}")"; fi
}
