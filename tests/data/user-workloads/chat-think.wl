# A multi-turn chat: each user reads the answer and thinks before the next question.
workload chat_think {
  doc "Multi-turn chat with think time"
  params { users: int = 3; turns: int = 4 }
  session user repeat $users {
    system "You are a friendly tutor."
    repeat $turns label turn {
      user filler 150, "\n\nExplain."
      reply 24 replay content
      wait uniform(20ms, 60ms) reading 2000
    }
    user "Thanks!"
    reply 4 label bye
  }
  gates { kept: overall reuse{turn, warm} >= 80% -> history_lost }
}
