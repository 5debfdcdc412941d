"""The controller: informers -> store -> scheduling core -> enact; leader terms. (The replica's
process, which runs it beside the webhook and the dashboard, is ``admission.app.process``.)"""
