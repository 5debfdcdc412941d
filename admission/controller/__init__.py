"""The controller: informers -> store -> scheduling core -> enact; leader terms; the replica process."""
