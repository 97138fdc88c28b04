# shellcheck shell=bash
# lib-deps.sh - the Debian packages arborfs needs to build and test, and the
# code that checks and installs them.  Sourced by scripts/quickstart.sh and
# scripts/test.sh; defines functions only.
#
#   arb_ensure_deps    install what is missing (as root) or print the
#                      `sudo apt-get install ...` line and return 1
#
# ARBOR_SKIP_DEPS=1 skips the check (a machine that is not Debian-like, or
# a developer who installs by hand).

ARB_DEB_PACKAGES=(meson ninja-build gcc pkg-config libfuse3-dev fuse3
	zlib1g-dev uuid-dev check)

# Print the packages of ARB_DEB_PACKAGES that are not installed, one a line.
arb_missing_deps() {
	local pkg status
	for pkg in "${ARB_DEB_PACKAGES[@]}"; do
		status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" \
			2>/dev/null || true)
		# "ii " = installed; anything else (absent, half-installed,
		# removed with config left) needs an install.
		if [[ $status != ii* ]]; then
			printf '%s\n' "$pkg"
		fi
	done
}

arb_ensure_deps() {
	local -a missing
	local apt=(apt-get -y -q -o Dpkg::Use-Pty=0 install)

	if [[ ${ARBOR_SKIP_DEPS:-0} == 1 ]]; then
		return 0
	fi
	if ! command -v dpkg-query >/dev/null 2>&1; then
		echo "deps: no dpkg-query (not Debian?): not checking packages;" \
			"needed: ${ARB_DEB_PACKAGES[*]}" >&2
		return 0
	fi

	mapfile -t missing < <(arb_missing_deps)
	if ((${#missing[@]} == 0)); then
		echo "deps: all ${#ARB_DEB_PACKAGES[@]} packages installed"
		return 0
	fi

	if ((EUID != 0)); then
		echo "deps: missing packages; install them with:" >&2
		echo "sudo apt-get install ${missing[*]}"
		return 1
	fi

	echo "deps: installing ${missing[*]}"
	# The package lists may be fine already: update only when the
	# first attempt fails (stale or absent lists).
	if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" "${missing[@]}"; then
		echo "deps: install failed; running apt-get update and retrying"
		DEBIAN_FRONTEND=noninteractive apt-get -q update || return 1
		DEBIAN_FRONTEND=noninteractive "${apt[@]}" "${missing[@]}" ||
			return 1
	fi

	mapfile -t missing < <(arb_missing_deps)
	if ((${#missing[@]} != 0)); then
		echo "deps: still missing after install: ${missing[*]}" >&2
		return 1
	fi
	return 0
}
