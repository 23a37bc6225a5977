workload shared_text {
  params { question: string = "Which tool fits?" }
  text system_prompt = "You are an agent.", filler 500
  text tools = "Tools:", filler 200
  session agent repeat 3 {
    system $system_prompt, $tools
    user $question, " (copy ", filler 5 * ($copy + 1), ")"
    reply 16
  }
  session late {
    phase after { system $system_prompt, $tools; user "Late question."; reply 16 }
  }
}
