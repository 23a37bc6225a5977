workload w {
  params {
    mode: string = "brnach" one of "branch", "continuation"
    level: int = 1 one of "1", "2"
  }
  session main {
    if $mode == "branch" { user "x" } else if $level > 1 { user "y" }
    reply $level
  }
}
